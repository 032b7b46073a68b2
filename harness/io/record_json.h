// One description of a record, every JSON format derived from it. A record type lists its fields once, in a
// `visit_fields` beside its definition (found by argument-dependent lookup, so it lives in the record's namespace):
//
//   template <class V> void visit_fields(SignalComparison& g, V& v) {
//     v.required("name", g.name);       // reading: an error when absent
//     v("max_margin", g.max_margin);    // absent: the member's default stays
//     v.optional("validation", g.validation, !g.validation.mode.empty());  // written only when the flag is true
//   }
//
// The field's kind comes from its C++ type: std::string (a JSON string), bool, int64_t (an integer), double (a number;
// NaN and infinities are null, null reads as NaN), std::vector<double>, a nested record (an object) and
// std::vector<record> (a list of objects); also std::vector of lists (a matrix), std::map<std::string, kind> (an
// object of named values), std::optional<kind> (null when empty) and std::variant<kind...> (the first alternative
// that reads, in order: std::variant<double, std::string> is a number or the text that stands in for it), and an
// enum with its words (a JSON string: the enum's `enum_words(E)`, found by argument-dependent lookup, lists every
// enumerator's word in declaration order, as validate/fleet_status.h does; a word not on the list is a FieldError).
// `record_to_json` writes, `record_from_json` reads and throws `FieldError` naming the field (its path inside the
// record: "signals[2].max_margin"), what was expected and what was found; unknown keys are ignored (a newer writer's
// fields). Writing visits a const record through the same function: the writer only reads the fields.
// `record_to_json<nlohmann::ordered_json>` keeps the fields in visiting order (sweep.json, localize.json: files a
// reader scans top to bottom); the default, nlohmann::json, sorts the keys.
#pragma once

#include "io/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace ampcheck::io {

// A field of a JSON record that is missing or of the wrong kind.
struct FieldError : std::runtime_error {
  FieldError(std::string field_path, std::string expected_kind, std::string found)
      : std::runtime_error("field '" + field_path + "': expected " + expected_kind + ", got " + found),
        field(std::move(field_path)),
        expected(std::move(expected_kind)),
        got(std::move(found)) {}
  std::string field, expected, got;
};

// Every string of a JSON document (object keys too) made printable (io/text.h), in place: what a writer does before
// dump() (nlohmann throws type_error 316 on a string that is not UTF-8) and a reader after parse() (JSON may spell
// control characters, "\u001b").
void make_json_strings_printable(nlohmann::json& j);

// A JSON value as an error message quotes it: printable, at most ~80 characters.
std::string quote_json_value(const nlohmann::json& j);

template <class Json = nlohmann::json, class T>
Json record_to_json(const T& record);
template <class T>
void record_from_json(const nlohmann::json& j, T& record);

// ---------------------------------------------------------------------------------------------------------------------
// the field kinds

namespace record_detail {

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsMap : std::false_type {};
template <class T>
struct IsMap<std::map<std::string, T>> : std::true_type {};
template <class T>
struct IsVariant : std::false_type {};
template <class... T>
struct IsVariant<std::variant<T...>> : std::true_type {};

template <class F>
constexpr bool kScalar = std::is_same_v<F, std::string> || std::is_same_v<F, bool> || std::is_same_v<F, int64_t> ||
                         std::is_same_v<F, double>;
// A nested record: any other type (its visit_fields found by argument-dependent lookup).
template <class F>
constexpr bool kRecord = !kScalar<F> && !IsVector<F>::value && !IsOptional<F>::value && !IsMap<F>::value &&
                         !IsVariant<F>::value && !std::is_enum_v<F>;

// An enum's words, "identical, differs or \"\"": what a field of it may hold.
inline std::string enum_word_list(const std::vector<std::string>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i)
    s += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + (words[i].empty() ? "\"\"" : words[i]);
  return s;
}

// The field names of a record in visiting order, for messages: "{option, label, applied, note}".
struct NameCollector {
  std::string names;
  template <class F>
  void operator()(const char* name, F&) {
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  template <class F>
  void required(const char* name, F& f) {
    (*this)(name, f);
  }
  template <class F>
  void optional(const char* name, F& f, bool) {
    (*this)(name, f);
  }
};
template <class T>
std::string field_names() {
  T probe{};
  NameCollector c;
  visit_fields(probe, c);
  return "{" + c.names + "}";
}

template <class F>
std::string kind_name();
template <class Var, size_t I = 0>
std::string variant_kind_names();

template <class F>
std::string kind_name() {
  if constexpr (std::is_same_v<F, std::string>) return "a string";
  else if constexpr (std::is_same_v<F, bool>)
    return "true or false";
  else if constexpr (std::is_same_v<F, int64_t>)
    return "an integer";
  else if constexpr (std::is_same_v<F, double>)
    return "a number or null";
  else if constexpr (IsVector<F>::value) {
    using E = typename F::value_type;
    if constexpr (std::is_same_v<E, double>) return "a list of numbers (null: not measured)";
    else if constexpr (std::is_same_v<E, std::string>)
      return "a list of strings";
    else if constexpr (std::is_same_v<E, int64_t>)
      return "a list of integers";
    else if constexpr (std::is_same_v<E, bool>)
      return "a list of true / false";
    else if constexpr (kRecord<E>)
      return "a list of " + field_names<E>() + " objects";
    else
      return "a list, each " + kind_name<E>();
  } else if constexpr (IsOptional<F>::value)
    return kind_name<typename F::value_type>() + " or null";
  else if constexpr (IsMap<F>::value)
    return "an object, each value " + kind_name<typename F::mapped_type>();
  else if constexpr (IsVariant<F>::value)
    return variant_kind_names<F>();
  else if constexpr (std::is_enum_v<F>)
    return "one of " + enum_word_list(enum_words(F{}));
  else
    return "an object " + field_names<F>();
}

// "a number or null or a string": the alternatives of a variant.
template <class Var, size_t I>
std::string variant_kind_names() {
  std::string s = kind_name<std::variant_alternative_t<I, Var>>();
  if constexpr (I + 1 < std::variant_size_v<Var>) s += " or " + variant_kind_names<Var, I + 1>();
  return s;
}

template <class Json, class F>
Json to_json_value(const F& v) {
  if constexpr (std::is_same_v<F, double>) return std::isfinite(v) ? Json(v) : Json(nullptr);
  else if constexpr (kScalar<F>)
    return Json(v);
  else if constexpr (IsVector<F>::value) {
    Json a = Json::array();
    for (const auto& e : v) a.push_back(to_json_value<Json>(static_cast<const typename F::value_type&>(e)));
    return a;
  } else if constexpr (IsOptional<F>::value)
    return v ? to_json_value<Json>(*v) : Json(nullptr);
  else if constexpr (IsMap<F>::value) {
    Json o = Json::object();
    for (const auto& [name, e] : v) o[name] = to_json_value<Json>(e);
    return o;
  } else if constexpr (IsVariant<F>::value)
    return std::visit([](const auto& e) { return to_json_value<Json>(e); }, v);
  else if constexpr (std::is_enum_v<F>)
    return Json(enum_words(F{}).at(static_cast<size_t>(v)));
  else
    return record_to_json<Json>(v);
}

template <class F>
void from_json_value(const nlohmann::json& j, F& v, const std::string& field);

// The first alternative of a variant that reads j (false: none does).
template <class Var, size_t I = 0>
bool read_variant(const nlohmann::json& j, Var& v, const std::string& field) {
  if constexpr (I == std::variant_size_v<Var>) return false;
  else {
    std::variant_alternative_t<I, Var> e{};
    try {
      from_json_value(j, e, field);
    } catch (const FieldError&) {
      return read_variant<Var, I + 1>(j, v, field);
    }
    v = std::move(e);
    return true;
  }
}

template <class F>
void from_json_value(const nlohmann::json& j, F& v, const std::string& field) {
  auto wrong = [&](const std::string& expected) { return FieldError(field, expected, quote_json_value(j)); };
  if constexpr (std::is_same_v<F, std::string>) {
    if (!j.is_string()) throw wrong(kind_name<F>());
    v = j.get<std::string>();
  } else if constexpr (std::is_same_v<F, bool>) {
    if (!j.is_boolean()) throw wrong(kind_name<F>());
    v = j.get<bool>();
  } else if constexpr (std::is_same_v<F, int64_t>) {
    if (j.is_number_unsigned() ? j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                               : !j.is_number_integer())
      throw wrong(kind_name<F>());
    v = j.get<int64_t>();
  } else if constexpr (std::is_same_v<F, double>) {
    if (!j.is_null() && !j.is_number()) throw wrong(kind_name<F>());
    v = j.is_null() ? NAN : j.get<double>();
  } else if constexpr (IsVector<F>::value) {
    using E = typename F::value_type;
    if (!j.is_array()) throw wrong(kind_name<F>());
    v.clear();
    for (size_t i = 0; i < j.size(); ++i) {
      E e{};
      if constexpr (kRecord<E>)  // a list of records: an entry that is not an object names the list
        if (!j[i].is_object())
          throw FieldError(field, field_names<E>() + " objects",
                           quote_json_value(j[i]) + " (entry " + std::to_string(i) + ")");
      from_json_value(j[i], e, field + "[" + std::to_string(i) + "]");
      v.push_back(std::move(e));
    }
  } else if constexpr (IsOptional<F>::value) {
    if (j.is_null()) v.reset();
    else {
      typename F::value_type e{};
      from_json_value(j, e, field);
      v = std::move(e);
    }
  } else if constexpr (IsMap<F>::value) {
    if (!j.is_object()) throw wrong(kind_name<F>());
    v.clear();
    for (const auto& [name, e] : j.items()) from_json_value(e, v[name], field + "." + name);
  } else if constexpr (IsVariant<F>::value) {
    if (!read_variant(j, v, field)) throw wrong(kind_name<F>());
  } else if constexpr (std::is_enum_v<F>) {
    const auto& words = enum_words(F{});
    const auto it = j.is_string() ? std::find(words.begin(), words.end(), j.get<std::string>()) : words.end();
    if (it == words.end()) throw wrong(kind_name<F>());
    v = static_cast<F>(it - words.begin());
  } else {
    if (!j.is_object()) throw wrong(kind_name<F>());
    try {
      record_from_json(j, v);
    } catch (const FieldError& e) {  // its path inside this field
      throw FieldError(field + "." + e.field, e.expected, e.got);
    }
  }
}

template <class Json>
class Writer {
 public:
  Json out = Json::object();
  template <class F>
  void operator()(const char* name, const F& v) {
    out[name] = to_json_value<Json>(v);
  }
  template <class F>
  void required(const char* name, const F& v) {
    (*this)(name, v);
  }
  template <class F>
  void optional(const char* name, const F& v, bool written) {
    if (written) (*this)(name, v);
  }
};

class Reader {
 public:
  explicit Reader(const nlohmann::json& in) : in_(in) {}
  template <class F>
  void operator()(const char* name, F& v) {
    if (const auto it = in_.find(name); it != in_.end()) from_json_value(*it, v, name);
  }
  template <class F>
  void required(const char* name, F& v) {
    if (!in_.contains(name)) throw FieldError(name, kind_name<F>(), "nothing (the field is missing)");
    (*this)(name, v);
  }
  template <class F>
  void optional(const char* name, F& v, bool) {
    (*this)(name, v);
  }

 private:
  const nlohmann::json& in_;
};

}  // namespace record_detail

// ---------------------------------------------------------------------------------------------------------------------

template <class Json, class T>
Json record_to_json(const T& record) {
  record_detail::Writer<Json> w;
  visit_fields(const_cast<T&>(record), w);  // the writer reads the fields only
  return std::move(w.out);
}

// j: an object (else FieldError on the record itself, field ""). Fields absent from j keep record's values.
template <class T>
void record_from_json(const nlohmann::json& j, T& record) {
  if (!j.is_object()) throw FieldError("", record_detail::kind_name<T>(), quote_json_value(j));
  record_detail::Reader r(j);
  visit_fields(record, r);
}

}  // namespace ampcheck::io
