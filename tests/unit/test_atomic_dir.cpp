#include <gtest/gtest.h>

#include "temp_dir.h"
#include "util/atomic_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::read_text;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;
namespace fs = std::filesystem;

static int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicDir, CommitCreatesTheDirectory) {
  TempDir tmp;
  const fs::path final_path = tmp / "runs/x/step-1";  // parents are created too
  {
    AtomicDir dir(final_path);
    EXPECT_NE(dir.path(), final_path);
    EXPECT_EQ(dir.path().parent_path(), final_path.parent_path());
    write_text(dir.path() / "a.txt", "one");
    write_text(dir.path() / "sub/b.txt", "two");
    EXPECT_FALSE(fs::exists(final_path));  // invisible until commit
    dir.commit();
  }
  EXPECT_EQ(read_text(final_path / "a.txt"), "one");
  EXPECT_EQ(read_text(final_path / "sub/b.txt"), "two");
  EXPECT_EQ(entries(final_path.parent_path()), 1);  // no temp or old sibling left
}

TEST(AtomicDir, CommitReplacesExistingDirectory) {
  TempDir tmp;
  const fs::path final_path = tmp / "latest";
  write_text(final_path / "old.txt", "old");
  {
    AtomicDir dir(final_path);
    write_text(dir.path() / "new.txt", "new");
    dir.commit();
  }
  EXPECT_FALSE(fs::exists(final_path / "old.txt"));
  EXPECT_EQ(read_text(final_path / "new.txt"), "new");
  EXPECT_EQ(entries(tmp.path()), 1);
}

TEST(AtomicDir, NoCommitLeavesNothing) {
  TempDir tmp;
  const fs::path final_path = tmp / "out";
  {
    AtomicDir dir(final_path);
    write_text(dir.path() / "partial.bin", "xx");
  }
  EXPECT_EQ(entries(tmp.path()), 0);
}

TEST(AtomicDir, NoCommitKeepsThePreviousVersion) {
  TempDir tmp;
  const fs::path final_path = tmp / "out";
  write_text(final_path / "keep.txt", "keep");
  {
    AtomicDir dir(final_path);
    write_text(dir.path() / "partial.bin", "xx");
  }
  EXPECT_EQ(read_text(final_path / "keep.txt"), "keep");
  EXPECT_EQ(entries(tmp.path()), 1);
}

TEST(AtomicDir, FileInTheWayIsAUserError) {
  TempDir tmp;
  write_text(tmp / "out", "a file");
  AtomicDir dir(tmp / "out");
  try {
    dir.commit();
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find((tmp / "out").string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_text(tmp / "out"), "a file");
}

TEST(AtomicDir, UncreatableParentIsAUserError) {
  TempDir tmp;
  write_text(tmp / "file", "x");
  EXPECT_THROW(AtomicDir(tmp / "file/sub"), UserError);
}

TEST(WriteFileAtomic, ReplacesContentAndLeavesNoTemp) {
  TempDir tmp;
  write_file_atomic(tmp / "f.json", "first");
  write_file_atomic(tmp / "f.json", "second");
  EXPECT_EQ(read_text(tmp / "f.json"), "second");
  EXPECT_EQ(entries(tmp.path()), 1);
}

TEST(WriteFileAtomic, MissingDirectoryNamesThePath) {
  TempDir tmp;
  try {
    write_file_atomic(tmp / "no/such/f.json", "x");
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no/such/f.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
}
