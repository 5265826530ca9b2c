// viz/web/index.html, viz.js and viz.css, embedded at build time (viz/embed.cmake writes the definitions).
#pragma once

namespace minfer::viz {

extern const char* const kIndexHtml;  // holds the markers /*VIZ_CSS*/, /*VIZ_JS*/ and /*VIZ_DATA*/
extern const char* const kVizJs;
extern const char* const kVizCss;

}  // namespace minfer::viz
