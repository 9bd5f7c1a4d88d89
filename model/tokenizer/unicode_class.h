// UnicodeClass: the three character classes GPT-2's pre-tokenizer regex tells apart (\p{L},
// \p{N}, \s) and everything else. Letters and numbers come from a table generated from
// Unicode 14.0 (gen_unicode_class_table.py), so tokenization does not depend on the Unicode
// library or version of the machine it runs on.
#ifndef LINSERVE_MODEL_TOKENIZER_UNICODE_CLASS_H_
#define LINSERVE_MODEL_TOKENIZER_UNICODE_CLASS_H_

#include <cstdint>

namespace linserve {

enum class UnicodeClass : uint8_t {
  kLetter,      // general category L: Lu Ll Lt Lm Lo
  kNumber,      // general category N: Nd Nl No
  kWhiteSpace,  // the White_Space property (\s of Python's regex, Oniguruma and Rust's regex)
  kOther,       // everything else, unassigned code points included
};

// The class of code point `cp` (at most 0x10FFFF).
UnicodeClass ClassOf(char32_t cp);

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_UNICODE_CLASS_H_
