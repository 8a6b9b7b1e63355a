// How Topology::build splits the world into groups (comm/topology.h's group_split): every group
// is the ranks that differ only in its own coordinates, and under expert parallelism with
// context parallelism the expert-gradient group edp spans the cp ranks as dp_cp does.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "comm/topology.h"

namespace llmrun {
namespace {

struct Coords {
  int tp, cp, pp, dp;
};

Coords coords(const ParallelLayout& l, int r) {
  return {r % l.tp, (r / l.tp) % l.cp, (r / (l.tp * l.cp)) % l.pp, r / (l.tp * l.cp * l.pp)};
}

// The groups `g` splits the world into: by color, each group's members in key order.
std::vector<std::vector<int>> groups(const ParallelLayout& l, RankGroup g) {
  std::map<int, std::map<int, int>> by_color;  // color -> key -> world rank
  for (int r = 0; r < l.world(); ++r) {
    const GroupSplit s = group_split(l, r, g);
    EXPECT_TRUE(by_color[s.color].emplace(s.key, r).second) << "two ranks share a key";
  }
  std::vector<std::vector<int>> out;
  for (const auto& [color, members] : by_color) {
    std::vector<int> ranks;
    int expect_key = 0;
    for (const auto& [key, r] : members) {
      EXPECT_EQ(key, expect_key++) << "keys are the ranks 0..n-1 of the group";
      ranks.push_back(r);
    }
    out.push_back(ranks);
  }
  return out;
}

TEST(TopologyGroups, EachGroupVariesOnlyItsOwnCoordinates) {
  const ParallelLayout l{2, 2, 4, 2, 2};  // tp2 pp2 dp4 cp2 ep2: 32 ranks
  auto sizes = [&](RankGroup g) {
    std::set<size_t> s;
    for (const auto& members : groups(l, g)) s.insert(members.size());
    return s;
  };
  EXPECT_EQ(sizes(RankGroup::tp), std::set<size_t>{2});
  EXPECT_EQ(sizes(RankGroup::cp), std::set<size_t>{2});
  EXPECT_EQ(sizes(RankGroup::pp), std::set<size_t>{2});
  EXPECT_EQ(sizes(RankGroup::dp), std::set<size_t>{4});
  EXPECT_EQ(sizes(RankGroup::dp_cp), std::set<size_t>{8});
  EXPECT_EQ(sizes(RankGroup::ep), std::set<size_t>{2});
  EXPECT_EQ(sizes(RankGroup::edp), std::set<size_t>{4});  // dp / ep x cp
  for (const auto& members : groups(l, RankGroup::tp)) {
    const Coords a = coords(l, members[0]);
    for (int r : members) {
      const Coords b = coords(l, r);
      EXPECT_TRUE(a.cp == b.cp && a.pp == b.pp && a.dp == b.dp);
    }
  }
}

TEST(TopologyGroups, ExpertGradientsReduceOverEveryRankHoldingTheSameExperts) {
  for (const ParallelLayout& l : {ParallelLayout{1, 1, 2, 2, 2}, ParallelLayout{2, 2, 4, 2, 2},
                                  ParallelLayout{1, 1, 4, 1, 2}, ParallelLayout{2, 1, 8, 4, 4}}) {
    // ep: the same (tp, cp, pp) place, consecutive dp ranks (the token all-to-all stays at
    // one cp index).
    for (const auto& members : groups(l, RankGroup::ep)) {
      const Coords a = coords(l, members[0]);
      for (size_t i = 0; i < members.size(); ++i) {
        const Coords b = coords(l, members[i]);
        EXPECT_TRUE(a.tp == b.tp && a.cp == b.cp && a.pp == b.pp);
        EXPECT_EQ(b.dp % l.ep, int(i));
        EXPECT_EQ(b.dp / l.ep, a.dp / l.ep);
      }
    }
    // edp: exactly the ranks with the same (tp, pp, ep rank), every cp index included, in
    // dp_cp's order (cp fastest).
    std::map<int, std::set<int>> holders;  // (tp, pp, ep rank) -> the world ranks
    for (int r = 0; r < l.world(); ++r) {
      const Coords c = coords(l, r);
      holders[c.tp + l.tp * (c.pp + l.pp * (c.dp % l.ep))].insert(r);
    }
    const auto edp = groups(l, RankGroup::edp);
    ASSERT_EQ(edp.size(), holders.size());
    for (const auto& members : edp) {
      const Coords a = coords(l, members[0]);
      const auto& expected = holders[a.tp + l.tp * (a.pp + l.pp * (a.dp % l.ep))];
      EXPECT_EQ(std::set<int>(members.begin(), members.end()), expected);
      for (size_t i = 0; i < members.size(); ++i) {
        const Coords b = coords(l, members[i]);
        EXPECT_EQ(b.cp + l.cp * (b.dp / l.ep), int(i));
      }
    }
    // edp x ep is dp_cp: each edp group lies inside one dp_cp group, ep of them fill it.
    const auto dp_cp = groups(l, RankGroup::dp_cp);
    for (const auto& members : edp) {
      const std::set<int> e(members.begin(), members.end());
      int inside = 0;
      for (const auto& d : dp_cp) {
        const std::set<int> all(d.begin(), d.end());
        inside += std::includes(all.begin(), all.end(), e.begin(), e.end());
      }
      EXPECT_EQ(inside, 1);
    }
    EXPECT_EQ(edp.size(), dp_cp.size() * size_t(l.ep));
    EXPECT_EQ(int(edp[0].size()), l.dp * l.cp / l.ep);
  }
}

}  // namespace
}  // namespace llmrun
