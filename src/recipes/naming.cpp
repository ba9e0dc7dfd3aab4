// coetcd::naming: Go's endpoint JSON written and read with a scanner of just the JSON it needs.
#include <coetcd/error.hpp>
#include <coetcd/naming.hpp>

#include <boost/system/system_error.hpp>

#include <cstdio>

namespace coetcd::naming {
namespace {

// A cursor over JSON text. Each read_* returns false on text that is not JSON.
struct json_reader {
  std::string_view in;
  std::size_t at = 0;

  void space() {
    while (at < in.size() && (in[at] == ' ' || in[at] == '\t' || in[at] == '\n' || in[at] == '\r')) ++at;
  }
  bool take(char c) {
    space();
    if (at >= in.size() || in[at] != c) return false;
    ++at;
    return true;
  }
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool read_hex4(unsigned& cp) {
    if (at + 4 > in.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex(in[at++]);
      if (h < 0) return false;
      cp = cp * 16 + static_cast<unsigned>(h);
    }
    return true;
  }
  bool read_string(std::string& out) {
    if (!take('"')) return false;
    while (at < in.size() && in[at] != '"') {
      char c = in[at++];
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at >= in.size()) return false;
      char e = in[at++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!read_hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && at + 6 <= in.size() && in[at] == '\\' && in[at + 1] == 'u') {
            at += 2;
            unsigned low = 0;
            if (!read_hex4(low) || low < 0xDC00 || low >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return take('"');
  }
  // Any value, returned as its text.
  bool skip_value(std::string_view& text) {
    space();
    auto from = at;
    if (at >= in.size()) return false;
    char c = in[at];
    if (c == '"') {
      std::string ignored;
      if (!read_string(ignored)) return false;
    } else if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++at;
      space();
      if (at < in.size() && in[at] == close) {
        ++at;
      } else {
        for (;;) {
          if (c == '{') {
            std::string k;
            if (!read_string(k) || !take(':')) return false;
          }
          std::string_view inner;
          if (!skip_value(inner)) return false;
          if (take(close)) break;
          if (!take(',')) return false;
        }
      }
    } else {
      while (at < in.size() && (std::isalnum(static_cast<unsigned char>(in[at])) || in[at] == '-' || in[at] == '+' || in[at] == '.'))
        ++at;
      auto word = in.substr(from, at - from);
      bool number = !word.empty() && (std::isdigit(static_cast<unsigned char>(word[0])) || word[0] == '-');
      if (!(word == "null" || word == "true" || word == "false" || number)) return false;
    }
    text = in.substr(from, at - from);
    return true;
  }
  bool at_end() {
    space();
    return at == in.size();
  }
};

void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      // Go's encoder escapes these for HTML: the same text Go writes.
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string key(std::string_view target, std::string_view id) {
  std::string k(target);
  k += '/';
  k += id;
  return k;
}

std::string encode(const endpoint& e) {
  std::string_view metadata = e.metadata.empty() ? std::string_view("null") : std::string_view(e.metadata);
  json_reader check{metadata};
  std::string_view text;
  if (!check.skip_value(text) || !check.at_end())
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd::naming::encode: metadata is not one JSON value");
  std::string out = "{\"Op\":0,\"Addr\":";
  append_quoted(out, e.addr);
  out += ",\"Metadata\":";
  out += text;
  out += '}';
  return out;
}

std::optional<endpoint> decode(std::string_view value) {
  json_reader r{value};
  if (!r.take('{')) return std::nullopt;
  endpoint e;
  bool has_addr = false;
  std::string_view op = "0";
  r.space();
  if (!r.take('}')) {
    for (;;) {
      std::string name;
      if (!r.read_string(name) || !r.take(':')) return std::nullopt;
      if (name == "Addr") {
        std::string addr;
        if (!r.read_string(addr)) return std::nullopt;
        e.addr = std::move(addr);
        has_addr = true;
      } else {
        std::string_view text;
        if (!r.skip_value(text)) return std::nullopt;
        if (name == "Metadata") e.metadata = std::string(text);
        if (name == "Op") op = text;
      }
      if (r.take('}')) break;
      if (!r.take(',')) return std::nullopt;
    }
  }
  if (!r.at_end() || !has_addr || op != "0") return std::nullopt;
  return e;
}

std::map<std::string, endpoint> endpoints(const cache& c) {
  std::map<std::string, endpoint> out;
  for (auto& kv : c.range())
    if (auto e = decode(kv.value)) out.emplace(kv.key, std::move(*e));
  return out;
}

}  // namespace coetcd::naming
