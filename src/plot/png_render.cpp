#include "plot/png_render.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/error.h"
#include "util/file_io.h"

extern char** environ;

namespace llmrun {

namespace fs = std::filesystem;

namespace {

// Removes the temporary files on every path out, including exceptions.
struct TempFiles {
  std::vector<fs::path> paths;
  ~TempFiles() {
    std::error_code ec;
    for (const auto& p : paths) fs::remove(p, ec);
  }
};

}  // namespace

void write_png_from_svg(const std::string& svg, const std::string& png_path) {
  const fs::path out(png_path);
  // Hidden siblings of the output: same filesystem, so the final rename is atomic.
  std::string hidden = ".";
  hidden += out.filename().string();
  hidden += ".tmp-";
  hidden += std::to_string(getpid());
  const fs::path stem = out.parent_path() / hidden;
  TempFiles tmp{{fs::path(stem).concat(".svg"), fs::path(stem).concat(".png")}};
  {
    FileWriter w(tmp.paths[0]);
    w.write(svg);
    w.close();
  }
  std::vector<std::string> argv = {
      "rsvg-convert",        "--format",           "png", "--background-color", "white", "--output",
      tmp.paths[1].string(), tmp.paths[0].string()};
  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "rsvg-convert", nullptr, nullptr, c_argv.data(), environ);
  if (err == ENOENT)
    throw UserError(
        "writing " + png_path +
        " needs rsvg-convert, which is not installed (Debian: apt-get install librsvg2-bin, or run "
        "scripts/install-deps.sh); or write an .svg instead");
  if (err != 0)
    throw UserError("cannot start rsvg-convert for " + png_path + ": " + std::strerror(err));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(tmp.paths[1]))
    throw UserError("rsvg-convert failed to render " + png_path +
                    " (its message is above); the .svg route needs no tool");
  fsync_path(tmp.paths[1]);
  std::error_code ec;
  fs::rename(tmp.paths[1], out, ec);
  if (ec) throw UserError(png_path + ": cannot write: " + ec.message());
  fsync_path(out.parent_path().empty() ? fs::path(".") : out.parent_path());
}

}  // namespace llmrun
