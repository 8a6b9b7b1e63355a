// The emulated NCCL's shared memory (see the header).
#include "emulated_nccl_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace emu_nccl {

Segment::Segment(Segment&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Segment::~Segment() { reset(); }

void Segment::reset() {
  if (data_ && bytes_) munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

bool Segment::create(const std::string& name, size_t bytes, bool exclusive, std::string& error) {
  reset();
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | (exclusive ? O_EXCL : 0), 0600);
  if (fd < 0) {
    error = "shm_open(" + name + "): " + std::strerror(errno);
    return false;
  }
  const size_t mapped = bytes ? bytes : 1;
  // Ranks that open the segment together all size it alike; a new one reads as zeros.
  if (ftruncate(fd, off_t(mapped)) != 0) {
    error = "ftruncate(" + name + "): " + std::strerror(errno);
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "mmap(" + name + "): " + std::strerror(errno);
    return false;
  }
  data_ = p;
  bytes_ = mapped;
  return true;
}

bool Segment::open(const std::string& name, std::string& error) {
  reset();
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    if (errno != ENOENT) error = "shm_open(" + name + "): " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return false;  // created but not sized yet: look again later
  }
  void* p = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "mmap(" + name + "): " + std::strerror(errno);
    return false;
  }
  data_ = p;
  bytes_ = size_t(st.st_size);
  return true;
}

void remove_segment(const std::string& name) { shm_unlink(name.c_str()); }

void remove_segments(const std::string& name) {
  const std::string base = name.substr(1);  // /dev/shm lists names without the leading '/'
  std::vector<std::string> doomed;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n == base || n.rfind(base + "-", 0) == 0) doomed.push_back("/" + n);
    }
    closedir(d);
  }
  for (const std::string& n : doomed) shm_unlink(n.c_str());
  shm_unlink(name.c_str());
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // An exited process its parent has not reaped yet is a zombie: gone too.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char line[512] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* close_paren = read ? std::strrchr(line, ')') : nullptr;
  return !(close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z');
}

void remove_abandoned() {
  constexpr char kPrefix[] = "llmrun-nccl-";
  std::vector<std::string> controls;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind(kPrefix, 0) == 0 && n.size() == sizeof kPrefix - 1 + 32)
        controls.push_back("/" + n);
    }
    closedir(d);
  }
  for (const std::string& name : controls) {
    Segment s;
    std::string error;
    if (!s.open(name, error) || s.bytes() < sizeof(Control)) continue;
    const Control* c = static_cast<const Control*>(s.data());
    const int n = c->nranks.load();
    bool anyone = false, alive = false;
    for (int r = 0; r < n && r < kMaxRanks && !alive; ++r) {
      if (!c->slots[r].joined.load()) continue;
      anyone = true;
      alive = process_alive(c->slots[r].pid);
    }
    if (anyone && !alive) remove_segments(name);  // one being joined right now has a live rank
  }
}

}  // namespace emu_nccl
