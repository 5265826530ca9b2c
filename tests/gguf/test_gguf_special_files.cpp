// Paths that are not regular files (a FIFO, a directory, a character device) fail at once with "not a
// regular file" instead of blocking in open() (a FIFO waits there for a writer) or reading garbage.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"

namespace minfer {
namespace {

// Opening `path` fails within five seconds with "not a regular file" and `kind`.
void expect_not_regular(const std::string& path, const std::string& kind) {
    auto opened = std::async(std::launch::async, [&] {
        try {
            GgufFile::open(path);
            return std::string("opened");
        } catch (const Error& e) {
            return std::string(e.what());
        }
    });
    if (opened.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
        ADD_FAILURE() << path << ": open() blocked";
        const int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // unblocks a reader waiting on a FIFO
        if (w >= 0) ::close(w);
    }
    const std::string msg = opened.get();
    EXPECT_NE(msg.find(path + ": not a regular file"), std::string::npos) << msg;
    EXPECT_NE(msg.find(kind), std::string::npos) << msg;
}

TEST(GgufSpecialFiles, FifoFailsWithoutBlocking) {
    test::TempDir tmp;
    const std::string fifo = tmp.file("model.gguf");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_not_regular(fifo, "a FIFO");
}

TEST(GgufSpecialFiles, DirectoryAndDeviceFail) {
    test::TempDir tmp;
    expect_not_regular(tmp.dir(), "a directory");
    for (const char* dev : {"/dev/zero", "/dev/urandom", "/dev/null"}) {
        struct stat st {};
        if (::stat(dev, &st) == 0 && S_ISCHR(st.st_mode))
            return expect_not_regular(dev, "a character device");
    }
}

}  // namespace
}  // namespace minfer
