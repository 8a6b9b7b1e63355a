#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <utility>

#include "util/error.h"

namespace llmrun {

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  for (const auto& [name, m] : units)
    if (unit == name) mult = m;
  double value = 0;
  try {
    value = i ? std::stod(text.substr(0, i)) : -1;
  } catch (const std::exception&) {
    value = -1;
  }
  if (mult == 0 || !(value > 0) || !std::isfinite(value * mult))
    throw UserError(flag + " " + text + ": expected a size such as 2GB, 500MB or 1GiB");
  return uint64_t(value * mult);
}

}  // namespace llmrun
