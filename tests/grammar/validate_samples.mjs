// Validates the random-walk samples of test_grammar (GrammarCorpus) against their schemas with ajv
// (draft 2020-12, with ajv-formats), independently of minfer's grammar code.
//   node validate_samples.mjs SAMPLES_JSON SCHEMA_DIR NODE_DIR
// NODE_DIR holds node_modules/ajv and ajv-formats (scripts/setup.sh installs them into build/node). Exits
// 77 (ctest's SKIP_RETURN_CODE) when a package is absent, 1 when any sample fails to parse or validate.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [samplesFile, schemaDir, nodeDir] = process.argv.slice(2);
let Ajv2020, addFormats;
try {
  const require = createRequire(path.join(path.resolve(nodeDir ?? "."), "package.json"));
  Ajv2020 = require("ajv/dist/2020").default;
  addFormats = require("ajv-formats").default;
} catch (e) {
  console.log(`skipped: ajv or ajv-formats is not in ${nodeDir}/node_modules (scripts/setup.sh installs them)`);
  process.exit(77);
}

const corpus = JSON.parse(fs.readFileSync(samplesFile, "utf8"));
let failures = 0, checked = 0;
for (const { schema_file: file, samples } of corpus) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  const validate = ajv.compile(JSON.parse(fs.readFileSync(path.join(schemaDir, file), "utf8")));
  for (const text of samples) {
    ++checked;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      console.log(`${file}: not JSON: ${JSON.stringify(text)}`);
      ++failures;
      continue;
    }
    if (!validate(value)) {
      console.log(`${file}: invalid: ${JSON.stringify(text)}\n  ${ajv.errorsText(validate.errors)}`);
      ++failures;
    }
  }
}
console.log(`${checked} samples of ${corpus.length} schemas checked, ${failures} failed`);
process.exit(failures === 0 && checked > 0 ? 0 : 1);
