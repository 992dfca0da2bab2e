// Lexing and parsing of Jinja templates: first the source is cut into text and tags (applying whitespace
// control, trim_blocks and lstrip_blocks), then each tag's contents are tokenised and parsed by recursive
// descent with Jinja2's operator precedence.
#include <cctype>
#include <cstring>

#include "ast.h"

namespace ftllm::jinja {

namespace {

struct Segment {
  enum Kind { Text, Expression, Statement } kind;
  std::string content;
  int line;
};

[[noreturn]] void fail(int line, const std::string& why) {
  throw TemplateError("chat template line " + std::to_string(line) + ": " + why);
}

int line_at(const std::string& s, size_t pos, size_t from, int line_from) {
  for (size_t i = from; i < pos && i < s.size(); ++i)
    if (s[i] == '\n') ++line_from;
  return line_from;
}

// The end of an expression or statement tag: the first `close` outside string literals.
size_t find_tag_end(const std::string& src, size_t from, const char* close) {
  char quote = 0;
  for (size_t i = from; i + 1 < src.size(); ++i) {
    char c = src[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == close[0] && src[i + 1] == close[1]) {
      return i;
    }
  }
  return std::string::npos;
}

// Cuts the source into segments, with Jinja's whitespace handling applied to the text: "-" strips all
// whitespace on that side; trim_blocks drops the first newline after a block or comment tag; lstrip_blocks
// drops spaces and tabs between the start of a line and a block or comment tag ("+" keeps them).
std::vector<Segment> cut(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0, counted = 0;
  int line = 1;
  bool line_starting = true;  // the text at pos begins a line (as jinja2's lexer tracks it)
  auto is_blank = [](const std::string& t, size_t from) {
    return t.find_first_not_of(" \t", from) == std::string::npos;
  };
  while (pos <= src.size()) {
    size_t open = pos;
    for (;; ++open) {
      open = src.find('{', open);
      if (open == std::string::npos || open + 1 >= src.size()) {
        open = std::string::npos;
        break;
      }
      char k = src[open + 1];
      if (k == '{' || k == '%' || k == '#') break;
    }
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text, line_at(src, pos, counted, line)});
      break;
    }
    line = line_at(src, open, counted, line);
    counted = open;
    const char kind = src[open + 1];
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t inner = open + 2;
    const bool strip_before = inner < src.size() && src[inner] == '-';
    const bool keep_left = inner < src.size() && src[inner] == '+';
    if (strip_before || keep_left) ++inner;
    size_t end = kind == '#' ? src.find(close, inner) : find_tag_end(src, inner, close);
    if (end == std::string::npos) fail(line, std::string("tag opened with {") + kind + " is never closed");
    const bool strip_after = end > inner && src[end - 1] == '-';
    std::string body = src.substr(inner, end - inner - (strip_after ? 1 : 0));

    if (strip_before) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if (kind != '{' && !keep_left) {
      size_t nl = text.rfind('\n');
      size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || line_starting) && is_blank(text, from)) text.erase(from);
    }
    if (!text.empty()) out.push_back({Segment::Text, text, line});

    pos = end + 2;
    line_starting = false;
    if (strip_after) {
      while (pos < src.size() && std::isspace(static_cast<unsigned char>(src[pos]))) line_starting = src[pos++] == '\n';
    } else if (kind != '{' && pos < src.size() && src[pos] == '\n') {
      ++pos;  // trim_blocks
      line_starting = true;
    }
    if (kind == '#') continue;

    // {% raw %}: everything up to {% endraw %} is text.
    std::string trimmed = body;
    trimmed.erase(0, trimmed.find_first_not_of(" \t\r\n"));
    trimmed.erase(trimmed.find_last_not_of(" \t\r\n") + 1);
    if (kind == '%' && trimmed == "raw") {
      size_t endraw = src.find("endraw", pos);
      if (endraw == std::string::npos) fail(line, "{% raw %} without {% endraw %}");
      size_t tag_open = src.rfind("{%", endraw);
      size_t tag_close = src.find("%}", endraw);
      std::string raw = src.substr(pos, tag_open - pos);
      if (src[tag_open + 2] == '-')
        while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.pop_back();
      out.push_back({Segment::Text, raw, line});
      pos = tag_close + 2;
      line_starting = false;
      if (src[tag_close - 1] == '-') {
        while (pos < src.size() && std::isspace(static_cast<unsigned char>(src[pos]))) line_starting = src[pos++] == '\n';
      } else if (pos < src.size() && src[pos] == '\n') {
        ++pos;
        line_starting = true;
      }
      continue;
    }
    out.push_back({kind == '{' ? Segment::Expression : Segment::Statement, body, line});
  }
  return out;
}

struct Token {
  enum Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

std::vector<Token> tokenize(const std::string& s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isspace(c)) {
      ++i;
    } else if (std::isalpha(c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(c)) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        is_float = true;
        ++j;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      std::string num = s.substr(i, j - i);
      std::erase(num, '_');
      Token t{is_float ? Token::Float : Token::Int, num};
      if (is_float) t.f = std::strtod(num.c_str(), nullptr);  // 1e999 is inf, as in Python
      else if (auto n = parse_int64(num)) t.i = *n;
      else fail(line, "the integer " + num + " does not fit in 64 bits");
      out.push_back(t);
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != char(c); ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          char e = s[++j];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            default: v += '\\'; v += e;
          }
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) fail(line, "unterminated string literal");
      out.push_back({Token::String, v});
      i = j + 1;
    } else {
      static const char* const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                        "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="};
      bool matched = false;
      for (const char* op : ops) {
        size_t n = std::strlen(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Token::Op, op});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(line, std::string("unexpected character '") + char(c) + "'");
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

// Parsing and rendering recurse once per level of nesting; a template from a file may nest without end.
constexpr int kMaxNesting = 200;
constexpr size_t kMaxExpressionTokens = 20000;

class Nesting {
 public:
  Nesting(int& depth, int line) : depth_(depth) {
    if (++depth_ > kMaxNesting) fail(line, "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  ~Nesting() { --depth_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  int& depth_;
};

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : t_(std::move(tokens)), line_(line) {
    if (t_.size() > kMaxExpressionTokens)
      fail(line, "an expression of more than " + std::to_string(kMaxExpressionTokens) + " tokens");
  }

  bool at_end() const { return t_[p_].kind == Token::End; }
  bool peek_name(const char* n, size_t ahead = 0) const {
    return p_ + ahead < t_.size() && t_[p_ + ahead].kind == Token::Name && t_[p_ + ahead].text == n;
  }
  bool peek_op(const char* o) const { return t_[p_].kind == Token::Op && t_[p_].text == o; }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++p_;
    return true;
  }
  bool accept_op(const char* o) {
    if (!peek_op(o)) return false;
    ++p_;
    return true;
  }
  void expect_op(const char* o) {
    if (!accept_op(o)) fail(line_, std::string("expected '") + o + "' but found '" + t_[p_].text + "'");
  }
  std::string expect_name() {
    if (t_[p_].kind != Token::Name) fail(line_, "expected a name but found '" + t_[p_].text + "'");
    return t_[p_++].text;
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + t_[p_].text + "'");
  }

  // expression with an optional unparenthesised tuple: "a, b"
  ExprPtr tuple_or_expr() {
    ExprPtr first = expression();
    if (!peek_op(",")) return first;
    auto t = node(Expr::Tuple);
    t->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (at_end() || peek_op(")")) break;
      t->items.push_back(expression());
    }
    return t;
  }

  // An expression without the trailing "x if c else y" form (a for loop's iterable, whose "if" filters).
  ExprPtr no_ternary() { return or_expr(); }

  ExprPtr expression() {
    Nesting nesting(depth_, line_);
    ExprPtr e = or_expr();
    if (accept_name("if")) {
      auto t = node(Expr::Ternary);
      t->b = std::move(e);
      t->a = or_expr();
      if (accept_name("else")) t->c = expression();
      return t;
    }
    return e;
  }

 private:
  ExprPtr node(Expr::Kind k) { return std::make_unique<Expr>(k, line_); }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) {
      auto n = node(Expr::Or);
      n->a = std::move(e);
      n->b = and_expr();
      e = std::move(n);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) {
      auto n = node(Expr::And);
      n->a = std::move(e);
      n->b = not_expr();
      e = std::move(n);
    }
    return e;
  }
  ExprPtr not_expr() {
    Nesting nesting(depth_, line_);
    if (accept_name("not")) {
      auto n = node(Expr::Not);
      n->a = not_expr();
      return n;
    }
    return compare();
  }
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    auto n = node(Expr::Binary);
    n->name = std::move(op);
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      const char* ops[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool done = true;
      for (const char* op : ops)
        if (accept_op(op)) {
          e = binary(op, std::move(e), math1());
          done = false;
          break;
        }
      if (!done) continue;
      if (accept_name("in")) {
        e = binary("in", std::move(e), math1());
      } else if (peek_name("not") && peek_name("in", 1)) {
        p_ += 2;
        e = binary("not in", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    for (;;) {
      if (accept_op("+")) e = binary("+", std::move(e), concat());
      else if (accept_op("-")) e = binary("-", std::move(e), concat());
      else return e;
    }
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (accept_op("~")) e = binary("~", std::move(e), math2());
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    for (;;) {
      if (accept_op("*")) e = binary("*", std::move(e), power());
      else if (accept_op("//")) e = binary("//", std::move(e), power());
      else if (accept_op("/")) e = binary("/", std::move(e), power());
      else if (accept_op("%")) e = binary("%", std::move(e), power());
      else return e;
    }
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept_op("**")) e = binary("**", std::move(e), unary());
    return e;
  }
  ExprPtr unary() {
    Nesting nesting(depth_, line_);
    if (accept_op("-")) {
      auto n = node(Expr::Unary);
      n->name = "-";
      n->a = unary();
      return n;
    }
    if (accept_op("+")) return unary();
    return filters(postfix(primary()));
  }
  void call_args(std::vector<Arg>& args) {
    while (!accept_op(")")) {
      if (t_[p_].kind == Token::Name && p_ + 1 < t_.size() && t_[p_ + 1].kind == Token::Op && t_[p_ + 1].text == "=") {
        std::string name = t_[p_].text;
        p_ += 2;
        args.push_back({name, expression()});
      } else {
        args.push_back({"", expression()});
      }
      if (!accept_op(",")) {
        expect_op(")");
        break;
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto n = node(Expr::Attr);
        n->a = std::move(e);
        if (t_[p_].kind == Token::Int) n->name = std::to_string(t_[p_++].i);
        else n->name = expect_name();
        e = std::move(n);
      } else if (accept_op("[")) {
        ExprPtr start, stop, step;
        bool slice = false;
        if (!peek_op(":")) start = expression();
        if (accept_op(":")) {
          slice = true;
          if (!peek_op("]") && !peek_op(":")) stop = expression();
          if (accept_op(":") && !peek_op("]")) step = expression();
        }
        expect_op("]");
        auto n = node(slice ? Expr::Slice : Expr::Item);
        n->a = std::move(e);
        if (slice) {
          n->items.push_back(std::move(start));
          n->items.push_back(std::move(stop));
          n->items.push_back(std::move(step));
        } else {
          n->b = std::move(start);
        }
        e = std::move(n);
      } else if (accept_op("(")) {
        auto n = node(Expr::Call);
        n->a = std::move(e);
        call_args(n->args);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        auto n = node(Expr::Filter);
        n->a = std::move(e);
        n->name = expect_name();
        while (accept_op(".")) n->name += "." + expect_name();
        if (accept_op("(")) call_args(n->args);
        e = std::move(n);
      } else if (accept_name("is")) {
        auto n = node(Expr::Test);
        n->a = std::move(e);
        n->negated = accept_name("not");
        n->name = expect_name();
        if (accept_op("(")) {
          call_args(n->args);
        } else if (!at_end() && t_[p_].kind != Token::Op && !peek_name("and") && !peek_name("or") &&
                   !peek_name("else") && !peek_name("if") && !peek_name("in") && !peek_name("not")) {
          n->args.push_back({"", primary_postfix()});  // "is divisibleby 3", "is sameas x"
        } else if (t_[p_].kind == Token::Op && (peek_op("(") || peek_op("[") || peek_op("-"))) {
          n->args.push_back({"", primary_postfix()});
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary_postfix() { return postfix(primary()); }
  ExprPtr primary() {
    const Token& t = t_[p_];
    if (t.kind == Token::String) {
      ++p_;
      std::string s = t.text;
      while (t_[p_].kind == Token::String) s += t_[p_++].text;  // adjacent literals concatenate
      auto n = node(Expr::Literal);
      n->literal = Value::string(s);
      return n;
    }
    if (t.kind == Token::Int || t.kind == Token::Float) {
      ++p_;
      auto n = node(Expr::Literal);
      n->literal = t.kind == Token::Int ? Value::integer(t.i) : Value::number(t.f);
      return n;
    }
    if (t.kind == Token::Name) {
      ++p_;
      auto n = node(Expr::Literal);
      if (t.text == "true" || t.text == "True") n->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") n->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") n->literal = Value::none();
      else {
        n->kind = Expr::Name;
        n->name = t.text;
      }
      return n;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return node(Expr::Tuple);
      ExprPtr e = tuple_or_expr();
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto n = node(Expr::List);
      while (!accept_op("]")) {
        n->items.push_back(expression());
        if (!accept_op(",")) {
          expect_op("]");
          break;
        }
      }
      return n;
    }
    if (accept_op("{")) {
      auto n = node(Expr::Dict);
      while (!accept_op("}")) {
        n->items.push_back(expression());
        expect_op(":");
        n->items.push_back(expression());
        if (!accept_op(",")) {
          expect_op("}");
          break;
        }
      }
      return n;
    }
    if (t.kind == Token::End) fail(line_, "the expression ends too early");
    fail(line_, "unexpected '" + t.text + "'");
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int line_;
  int depth_ = 0;
};

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  Body parse_body(const std::vector<std::string>& enders, std::string* found) {
    Nesting nesting(depth_, pos_ < s_.size() ? s_[pos_].line : 0);
    Body body;
    while (pos_ < s_.size()) {
      Segment& seg = s_[pos_];
      if (seg.kind == Segment::Text) {
        auto st = std::make_unique<Stmt>(Stmt::Text, seg.line);
        st->text = seg.content;
        body.push_back(std::move(st));
        ++pos_;
        continue;
      }
      if (seg.kind == Segment::Expression) {
        ExprParser ep(tokenize(seg.content, seg.line), seg.line);
        auto st = std::make_unique<Stmt>(Stmt::Output, seg.line);
        st->expr = ep.tuple_or_expr();
        ep.expect_end();
        body.push_back(std::move(st));
        ++pos_;
        continue;
      }
      ExprParser ep(tokenize(seg.content, seg.line), seg.line);
      std::string keyword = ep.expect_name();
      for (const std::string& e : enders)
        if (keyword == e) {
          if (found) *found = keyword;
          return body;
        }
      ++pos_;
      body.push_back(statement(keyword, ep, seg.line));
    }
    if (!enders.empty()) fail(s_.empty() ? 1 : s_.back().line, "missing {% " + enders.back() + " %}");
    return body;
  }

 private:
  // Consumes the current (ending) tag, which must hold only its keyword.
  void close_tag() {
    ExprParser ep(tokenize(s_[pos_].content, s_[pos_].line), s_[pos_].line);
    ep.expect_name();
    ++pos_;
  }
  ExprParser current_parser() { return ExprParser(tokenize(s_[pos_].content, s_[pos_].line), s_[pos_].line); }

  std::vector<std::string> targets(ExprParser& ep) {
    std::vector<std::string> names{ep.expect_name()};
    while (ep.accept_op(",")) names.push_back(ep.expect_name());
    return names;
  }

  void params(ExprParser& ep, std::vector<std::pair<std::string, ExprPtr>>& out) {
    if (!ep.accept_op("(")) return;
    while (!ep.accept_op(")")) {
      std::string name = ep.expect_name();
      ExprPtr def;
      if (ep.accept_op("=")) def = ep.expression();
      out.emplace_back(name, std::move(def));
      if (!ep.accept_op(",")) {
        ep.expect_op(")");
        break;
      }
    }
  }

  StmtPtr statement(const std::string& kw, ExprParser& ep, int line) {
    if (kw == "if") {
      auto st = std::make_unique<Stmt>(Stmt::If, line);
      ExprPtr cond = ep.tuple_or_expr();
      ep.expect_end();
      for (;;) {
        std::string found;
        Body body = parse_body({"elif", "else", "endif"}, &found);
        st->branches.emplace_back(std::move(cond), std::move(body));
        if (found == "endif") {
          close_tag();
          return st;
        }
        ExprParser next = current_parser();
        next.expect_name();
        ++pos_;
        if (found == "elif") {
          cond = next.tuple_or_expr();
          next.expect_end();
        } else {
          next.expect_end();
          Body else_body = parse_body({"endif"}, nullptr);
          st->branches.emplace_back(nullptr, std::move(else_body));
          close_tag();
          return st;
        }
      }
    }
    if (kw == "for") {
      auto st = std::make_unique<Stmt>(Stmt::For, line);
      st->targets = targets(ep);
      if (!ep.accept_name("in")) fail(line, "expected 'in' in for loop");
      st->expr = ep.no_ternary();
      if (ep.accept_name("if")) st->condition = ep.expression();
      ep.accept_name("recursive");
      ep.expect_end();
      std::string found;
      st->body = parse_body({"else", "endfor"}, &found);
      if (found == "else") {
        close_tag();
        st->else_body = parse_body({"endfor"}, nullptr);
      }
      close_tag();
      return st;
    }
    if (kw == "set") {
      std::string first = ep.expect_name();
      auto st = std::make_unique<Stmt>(Stmt::Set, line);
      st->targets = {first};
      if (ep.accept_op(".")) {
        st->targets.push_back(ep.expect_name());
        st->attr_target = true;
      } else {
        while (ep.accept_op(",")) st->targets.push_back(ep.expect_name());
      }
      if (ep.accept_op("=")) {
        st->expr = ep.tuple_or_expr();
        ep.expect_end();
        return st;
      }
      st->kind = Stmt::SetBlock;
      if (ep.accept_op("|")) {  // {% set x | filter %}
        auto f = std::make_unique<Expr>(Expr::Filter, line);
        f->name = ep.expect_name();
        st->expr = std::move(f);
      }
      ep.expect_end();
      st->body = parse_body({"endset"}, nullptr);
      close_tag();
      return st;
    }
    if (kw == "macro") {
      auto st = std::make_unique<Stmt>(Stmt::Macro, line);
      st->name = ep.expect_name();
      params(ep, st->params);
      ep.expect_end();
      st->body = parse_body({"endmacro"}, nullptr);
      close_tag();
      return st;
    }
    if (kw == "call") {
      auto st = std::make_unique<Stmt>(Stmt::CallBlock, line);
      params(ep, st->params);
      st->expr = ep.expression();
      ep.expect_end();
      st->body = parse_body({"endcall"}, nullptr);
      close_tag();
      return st;
    }
    if (kw == "filter") {
      auto st = std::make_unique<Stmt>(Stmt::FilterBlock, line);
      auto f = std::make_unique<Expr>(Expr::Filter, line);
      f->name = ep.expect_name();
      if (ep.accept_op("(")) {
        while (!ep.accept_op(")")) {
          f->args.push_back({"", ep.expression()});
          if (!ep.accept_op(",")) {
            ep.expect_op(")");
            break;
          }
        }
      }
      st->expr = std::move(f);
      ep.expect_end();
      st->body = parse_body({"endfilter"}, nullptr);
      close_tag();
      return st;
    }
    if (kw == "generation") {  // transformers' assistant-mask tag: renders its body
      auto st = std::make_unique<Stmt>(Stmt::If, line);
      Body body = parse_body({"endgeneration"}, nullptr);
      close_tag();
      auto yes = std::make_unique<Expr>(Expr::Literal, line);
      yes->literal = Value::boolean(true);
      st->branches.emplace_back(std::move(yes), std::move(body));
      return st;
    }
    if (kw == "break") return std::make_unique<Stmt>(Stmt::Break, line);
    if (kw == "continue") return std::make_unique<Stmt>(Stmt::Continue, line);
    fail(line, "unknown tag '" + kw + "'");
  }

  std::vector<Segment> s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<Template> parse_template(const std::string& source) {
  auto t = std::make_shared<Template>();
  StmtParser p(cut(source));
  t->body = p.parse_body({}, nullptr);
  return t;
}

}  // namespace ftllm::jinja
