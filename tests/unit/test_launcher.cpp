#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/launcher.h"

namespace llmrun {
namespace {

TEST(SlurmTasksOnNode, ReadsCompressedLists) {
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("8,4(x2)", 2), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), 0);  // no such node
  EXPECT_EQ(slurm_tasks_on_node("", 0), 0);
  EXPECT_EQ(slurm_tasks_on_node("x", 0), 0);
  EXPECT_EQ(slurm_tasks_on_node("2(x3", 0), 0);
}

// The variables srun --mpi=pmix sets for a 2-node step of 3 + 1 tasks, seen from node 0.
TEST(DetectLaunchEnvironment, SrunStepCounts) {
  const char* vars[][2] = {
      {"PMIX_RANK", "1"},    {"SLURM_PROCID", "1"},         {"SLURM_STEP_ID", "0"},
      {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "3,1"},
      {"SLURM_NODEID", "0"}};
  unsetenv("OMPI_COMM_WORLD_SIZE");
  for (auto& v : vars) setenv(v[0], v[1], 1);
  const LaunchEnvironment e = detect_launch_environment();
  for (auto& v : vars) unsetenv(v[0]);
  EXPECT_TRUE(e.under_launcher);
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.world_size, 4);  // the step's tasks, not the job's
  EXPECT_EQ(e.local_size, 3);
}

}  // namespace
}  // namespace llmrun
