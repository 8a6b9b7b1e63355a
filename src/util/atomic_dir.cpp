#include "util/atomic_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>

#include "util/error.h"
#include "util/file_io.h"

namespace fs = std::filesystem;

namespace llmrun {

// The pid in the name keeps concurrent writers (and a crashed earlier run, which
// had another pid) from colliding on the same temporary path.
static fs::path sibling(const fs::path& p, const char* tag) {
  fs::path name = p.filename();
  if (name.empty()) name = p.parent_path().filename();  // "dir/" spelled with a slash
  return p.parent_path() / (name.string() + tag + std::to_string(::getpid()));
}

static fs::path parent_dir(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

static void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw_io_error(to, "cannot rename " + from.string() + " to it", errno);
}

static void create_dirs_or_throw(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw_io_error(p, "cannot create directory", ec.value());
}

AtomicDir::AtomicDir(fs::path final_path) : final_(std::move(final_path)) {
  if (final_.filename().empty()) final_ = final_.parent_path();
  tmp_ = sibling(final_, ".tmp-");
  create_dirs_or_throw(parent_dir(final_));
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // leftover of an earlier process that had our pid
  if (!fs::create_directory(tmp_, ec) || ec)
    throw_io_error(tmp_, "cannot create directory", ec ? ec.value() : EEXIST);
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;  // a destructor must not throw; a stray temp dir is harmless
  fs::remove_all(tmp_, ec);
}

void AtomicDir::commit() {
  LLMRUN_CHECK(!committed_, "AtomicDir committed twice");
  // Children before their directory, so the directory's fsync covers final entries.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(tmp_, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file() || it->is_directory()) fsync_path(it->path());
  }
  if (ec) throw_io_error(tmp_, "cannot list directory", ec.value());
  fsync_path(tmp_);

  const fs::path old = sibling(final_, ".old-");
  const fs::file_status st = fs::symlink_status(final_);
  const bool replace = fs::exists(st);
  if (replace) {
    if (!fs::is_directory(st))
      throw UserError(final_.string() +
                      ": exists and is not a directory; remove it or choose another path");
    fs::remove_all(old, ec);
    rename_or_throw(final_, old);
  }
  if (std::rename(tmp_.c_str(), final_.c_str()) != 0) {
    int err = errno;
    if (replace) std::rename(old.c_str(), final_.c_str());  // put the previous version back
    throw_io_error(final_, "cannot rename " + tmp_.string() + " to it", err);
  }
  committed_ = true;
  fsync_path(parent_dir(final_));
  if (replace) fs::remove_all(old, ec);  // the new version is durable; the old is garbage
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  const fs::path tmp = sibling(path, ".tmp-");
  try {
    FileWriter f(tmp);
    f.write(bytes);
    f.sync();
    f.close();
    rename_or_throw(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(parent_dir(path));
}

}  // namespace llmrun
