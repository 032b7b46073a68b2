// Fields::str (parsing.h): here, since io, which it calls, is a dependency of this folder's sources only.
#include "scenario/parsing.h"

#include "io/text.h"

namespace ampcheck::scenario::parsing {

std::string Fields::str(const std::string& key, const std::string& d) {
  return io::printable_text(get<std::string>(key, d, "a string"));
}

}  // namespace ampcheck::scenario::parsing
