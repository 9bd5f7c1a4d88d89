#include "client/cli/flag_set.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace linserve::cli {
namespace {

std::string Normalize(absl::string_view name) {
  std::string out(name);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

absl::Status BadValue(absl::string_view name, absl::string_view text, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", text, ": expected ", expected));
}

template <typename T>
std::string DefaultText(const T& value) {
  return absl::StrCat(value);
}

std::string DefaultText(double value) { return absl::StrCat(value); }

}  // namespace

absl::StatusOr<std::vector<int32_t>> ParseIntList(absl::string_view text, absl::string_view what) {
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": \"", part, "\" is not a 32-bit integer"));
    }
    out.push_back(value);
  }
  return out;
}

std::string WrapText(absl::string_view text, int indent, int width) {
  const std::string margin(static_cast<size_t>(indent), ' ');
  std::string out;
  for (absl::string_view paragraph :
       absl::StrSplit(absl::StripTrailingAsciiWhitespace(text), '\n')) {
    if (paragraph.empty() || paragraph[0] == ' ') {
      absl::StrAppend(&out, paragraph.empty() ? "" : margin, paragraph, "\n");
      continue;
    }
    std::string line = margin;
    for (absl::string_view word : absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      const bool first = line.size() == margin.size();
      if (!first && line.size() + 1 + word.size() > static_cast<size_t>(width)) {
        absl::StrAppend(&out, line, "\n");
        line = margin;
      }
      absl::StrAppend(&line, line.size() == margin.size() ? "" : " ", word);
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

FlagSet::Flag& FlagSet::Register(absl::string_view name, absl::string_view value_name,
                                 absl::string_view help, std::string default_text) {
  Flag flag;
  flag.name = Normalize(name);
  flag.value_name = std::string(value_name);
  flag.help = std::string(help);
  flag.default_text = std::move(default_text);
  flags_.push_back(std::move(flag));
  return flags_.back();
}

void FlagSet::Add(absl::string_view name, std::string* value, absl::string_view value_name,
                  absl::string_view help) {
  Register(name, value_name, help, *value).assign = [value](absl::string_view text) {
    *value = std::string(text);
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, bool* value, absl::string_view help) {
  Flag& flag = Register(name, "", help, *value ? "true" : "");
  flag.is_bool = true;
  flag.assign = [value, n = flag.name](absl::string_view text) {
    const std::string lower = absl::AsciiStrToLower(text);
    if (lower == "true" || lower == "1" || lower == "yes") {
      *value = true;
    } else if (lower == "false" || lower == "0" || lower == "no") {
      *value = false;
    } else {
      return BadValue(n, text, "true or false");
    }
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, int32_t* value, absl::string_view value_name,
                  absl::string_view help) {
  Flag& flag = Register(name, value_name, help, DefaultText(*value));
  flag.assign = [value, n = flag.name](absl::string_view text) {
    if (!absl::SimpleAtoi(text, value)) return BadValue(n, text, "a 32-bit integer");
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, int64_t* value, absl::string_view value_name,
                  absl::string_view help) {
  Flag& flag = Register(name, value_name, help, DefaultText(*value));
  flag.assign = [value, n = flag.name](absl::string_view text) {
    if (!absl::SimpleAtoi(text, value)) return BadValue(n, text, "a 64-bit integer");
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, double* value, absl::string_view value_name,
                  absl::string_view help) {
  Flag& flag = Register(name, value_name, help, DefaultText(*value));
  flag.assign = [value, n = flag.name](absl::string_view text) {
    if (!absl::SimpleAtod(text, value)) return BadValue(n, text, "a number");
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, absl::Duration* value, absl::string_view value_name,
                  absl::string_view help) {
  Flag& flag = Register(name, value_name, help, absl::FormatDuration(*value));
  flag.assign = [value, n = flag.name](absl::string_view text) {
    if (!absl::ParseDuration(text, value)) {
      return BadValue(n, text, "a duration such as 500ms, 30s, 2m or inf");
    }
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, std::optional<int32_t>* value,
                  absl::string_view value_name, absl::string_view help) {
  Flag& flag = Register(name, value_name, help, "");
  flag.assign = [value, n = flag.name](absl::string_view text) {
    int32_t parsed = 0;
    if (!absl::SimpleAtoi(text, &parsed)) return BadValue(n, text, "a 32-bit integer");
    *value = parsed;
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, std::optional<uint64_t>* value,
                  absl::string_view value_name, absl::string_view help) {
  Flag& flag = Register(name, value_name, help, "");
  flag.assign = [value, n = flag.name](absl::string_view text) {
    uint64_t parsed = 0;
    if (!absl::SimpleAtoi(text, &parsed)) return BadValue(n, text, "an unsigned 64-bit integer");
    *value = parsed;
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, std::optional<float>* value,
                  absl::string_view value_name, absl::string_view help) {
  Flag& flag = Register(name, value_name, help, "");
  flag.assign = [value, n = flag.name](absl::string_view text) {
    float parsed = 0;
    if (!absl::SimpleAtof(text, &parsed)) return BadValue(n, text, "a number");
    *value = parsed;
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, std::vector<std::string>* value,
                  absl::string_view value_name, absl::string_view help) {
  Register(name, value_name, help, "").assign = [value](absl::string_view text) {
    value->emplace_back(text);
    return absl::OkStatus();
  };
}

void FlagSet::Add(absl::string_view name, std::vector<int32_t>* value,
                  absl::string_view value_name, absl::string_view help) {
  Flag& flag = Register(name, value_name, help, "");
  flag.assign = [value, n = flag.name](absl::string_view text) -> absl::Status {
    auto parsed = ParseIntList(text, absl::StrCat("--", n));
    if (!parsed.ok()) return parsed.status();
    value->insert(value->end(), parsed->begin(), parsed->end());
    return absl::OkStatus();
  };
}

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  const std::string normalized = Normalize(name);
  for (Flag& flag : flags_) {
    if (flag.name == normalized) return &flag;
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  return const_cast<FlagSet*>(this)->Find(name);
}

bool FlagSet::WasSet(absl::string_view name) const {
  const Flag* flag = Find(name);
  return flag != nullptr && flag->set;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(absl::Span<const std::string> args,
                                                        bool stop_at_positional) {
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + static_cast<ptrdiff_t>(i) + 1,
                        args.end());
      break;
    }
    // "-" alone is a positional (conventionally stdin or stdout).
    if (arg.size() < 2 || arg[0] != '-') {
      if (stop_at_positional) {
        positional.insert(positional.end(), args.begin() + static_cast<ptrdiff_t>(i),
                          args.end());
        break;
      }
      positional.emplace_back(arg);
      continue;
    }
    if (arg == "-h") arg = "--help";
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg, " (flags are written --name; see --help)"));
    }
    absl::string_view name = arg;
    std::optional<absl::string_view> text;
    if (const size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      text = arg.substr(eq + 1);
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !text.has_value() && absl::StartsWith(name, "no")) {
      Flag* negated = Find(name.substr(2));
      if (negated != nullptr && negated->is_bool) {
        flag = negated;
        text = "false";
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!text.has_value()) {
      if (flag->is_bool) {
        text = "true";
      } else if (i + 1 < args.size()) {
        text = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag->name, " needs a value (--", flag->name, "=",
                         flag->value_name, ")"));
      }
    }
    if (absl::Status status = flag->assign(*text); !status.ok()) return status;
    flag->set = true;
  }
  return positional;
}

std::string FlagSet::Usage() const {
  std::string out;
  for (const Flag& flag : flags_) {
    absl::StrAppend(&out, "  --", flag.name);
    if (!flag.is_bool) absl::StrAppend(&out, "=", flag.value_name);
    if (!flag.default_text.empty()) absl::StrAppend(&out, "  (default: ", flag.default_text, ")");
    absl::StrAppend(&out, "\n");
    absl::StrAppend(&out, WrapText(flag.help, 6, 92));
  }
  return out;
}

}  // namespace linserve::cli
