// Shared by the recipe loader, validator and describer; not part of the recipe API.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "recipe/recipe.h"

namespace llmrun::recipe_detail {

// Remembers where every dotted key ("train.steps") came from, so that an error found
// long after parsing (a cross-field check, a missing file) still points at the YAML
// line and column, or at the --set flag that supplied the value.
class Locator {
 public:
  explicit Locator(std::string file) : file_(std::move(file)) {}

  void add_override(const std::string& key, const std::string& flag) { overrides_[key] = flag; }
  void note(const std::string& key, const YAML::Mark& mark) { marks_[key] = mark; }

  // The --set flag that supplied `key` (or one of its parents), if any.
  const std::string* override_for(const std::string& key) const;
  // "--set a.b=v", "file:line:col" or, for keys with no known position, "file".
  std::string where(const std::string& key) const;
  // Throws UserError("<where>: key: msg"). A check that compares two keys names both:
  // when only `related` came from --set, the flag is the better place to point at.
  [[noreturn]] void fail(const std::string& key, const std::string& msg,
                         const std::string& related = "") const;

 private:
  std::string file_;
  std::map<std::string, std::string> overrides_;
  std::map<std::string, YAML::Mark> marks_;
};

// A key this build recognises from DESIGN.md but cannot honour, and the reason why.
struct Unsupported {
  const char* key;
  const char* reason;
};

// Typed reads of one YAML mapping. Construction rejects unknown, unsupported and
// duplicated keys, so a typo can never be silently ignored.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string prefix, Locator& loc,
            std::vector<std::string> known, std::vector<Unsupported> unsupported = {});

  bool has(const std::string& k) const { return is_map_ && node_[k]; }
  YAML::Node node(const std::string& k) const { return node_[k]; }
  std::string key(const std::string& k) const;  // dotted path of k, e.g. "train.steps"

  std::optional<int64_t> integer(const std::string& k, int64_t lo, int64_t hi) const;
  std::optional<double> number(const std::string& k) const;
  std::optional<bool> boolean(const std::string& k) const;
  // A null value (`dir:` or `--set checkpoint.dir=`) reads as "" when allow_empty.
  std::optional<std::string> string(const std::string& k, bool allow_empty = false) const;

 private:
  const YAML::Node node_;
  bool is_map_ = false;  // false for an absent section, which yaml-cpp cannot even be asked about
  std::string prefix_;
  Locator& loc_;
};

// Scalar conversions shared by MapReader and list readers (betas, data.train).
int64_t read_integer(const YAML::Node& n, const std::string& key, const Locator& loc, int64_t lo,
                     int64_t hi);
double read_number(const YAML::Node& n, const std::string& key, const Locator& loc);
std::string read_string(const YAML::Node& n, const std::string& key, const Locator& loc);
// How a value looks in an error message: 'abc', a mapping, a list or nothing.
std::string show(const YAML::Node& n);
// "WHERE:LINE:COL: what yaml-cpp found", as one printable line; nesting past yaml-cpp's depth
// limit (which it reports as "bad file") says so.
std::string yaml_error(const std::string& where, const YAML::ParserException& e);
std::string yaml_error_text(const YAML::ParserException& e);  // the same without the place

// The parallel, launch and memory sections (recipe_parallel.cpp); needs train read first.
void read_parallel(const MapReader& top, Locator& loc, const std::filesystem::path& base,
                   Recipe& r);

// model.moe (recipe_moe.cpp), once the rest of the model section is read; with model.from only
// the training-only keys (aux_loss, z_loss, capacity_factor) may be set.
void read_moe(const MapReader& model, Locator& loc, ModelConfig& c, bool from_hf);

// precision.fp8 (recipe_fp8.cpp), from the precision section's reader.
void read_fp8(const MapReader& precision, Locator& loc, Fp8Section& fp8);

// The finetune section (recipe_finetune.cpp); needs the model read first.
void read_finetune(const MapReader& top, Locator& loc, const std::filesystem::path& base,
                   Recipe& r);

// Range, cross-field and filesystem checks on a fully read recipe (recipe_validate.cpp).
void validate_recipe(const Recipe& r, const Locator& loc);

}  // namespace llmrun::recipe_detail
