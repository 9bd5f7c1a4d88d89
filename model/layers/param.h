// The parameters of a layer component kind (a mixer, a norm or an MLP): each kind declares them
// once as a table of ParamSpec (name, type, default, range, doc); the config parser, the JSON
// writer and docs/model-format.md (checked against the table by a test) all read that table.
// ParamValues holds what one component of one layer was given, defaults filled in.
#ifndef LINSERVE_MODEL_LAYERS_PARAM_H_
#define LINSERVE_MODEL_LAYERS_PARAM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace linserve {

enum class ParamType { kInt, kNumber, kBool, kChoice };

// An int (kInt), a double (kNumber), a bool (kBool) or one of the choices (kChoice).
using ParamValue = std::variant<int64_t, double, bool, std::string>;

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kInt;
  std::string doc;
  // kInt: [min, max]. kNumber: [min, max], or (min, max] when min_exclusive.
  double min = 0;
  double max = 0;
  bool min_exclusive = false;
  // kChoice: the accepted strings.
  std::vector<std::string> choices;
  // The value when config.json leaves the parameter out; none (and no default_from): required.
  std::optional<ParamValue> default_value;
  // Else, when non-empty: the default is this other parameter's value (declared before it).
  std::string default_from;
};

// One component's parameter values in the order of its kind's table.
class ParamValues {
 public:
  int64_t Int(std::string_view name) const { return std::get<int64_t>(Get(name)); }
  double Number(std::string_view name) const { return std::get<double>(Get(name)); }
  bool Bool(std::string_view name) const { return std::get<bool>(Get(name)); }
  const std::string& Choice(std::string_view name) const {
    return std::get<std::string>(Get(name));
  }
  // The value of `name`; the kinds only ask for parameters their table declares.
  const ParamValue& Get(std::string_view name) const;
  // Replaces the value of `name`, or appends it.
  void Set(std::string_view name, ParamValue value);

  const std::vector<std::pair<std::string, ParamValue>>& entries() const { return entries_; }
  friend bool operator==(const ParamValues&, const ParamValues&) = default;

 private:
  std::vector<std::pair<std::string, ParamValue>> entries_;
};

// Table entries. IntParam is required unless `default_from` names another parameter.
ParamSpec IntParam(std::string name, int64_t min, int64_t max, std::string doc,
                   std::string default_from = "");
// A number in (0, 1].
ParamSpec EpsilonParam(std::string name, double default_value, std::string doc);
// A number in [min, max], or (min, max] when min_exclusive.
ParamSpec NumberParam(std::string name, double min, double max, bool min_exclusive,
                      double default_value, std::string doc);
ParamSpec BoolParam(std::string name, bool default_value, std::string doc);
ParamSpec ChoiceParam(std::string name, std::vector<std::string> choices, std::string default_value,
                      std::string doc);

// The range a kInt or kNumber parameter accepts, as error messages and the docs print it:
// "[1, 1024]", "(0, 1]".
std::string RangeText(const ParamSpec& spec);
// The default as the docs print it: "1e-06", "\"gelu\"", "= head_dim", or "required".
std::string DefaultText(const ParamSpec& spec);
// The type as the docs print it: "integer", "number", "boolean" or "string".
std::string_view TypeText(ParamType type);

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_PARAM_H_
