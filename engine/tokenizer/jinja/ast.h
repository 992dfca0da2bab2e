// The parsed form of a template: expressions and statements, each with its template line for errors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "value.h"

namespace ftllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty for positional
  ExprPtr value;
};

struct Expr {
  enum Kind {
    Literal, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, And, Or, Not, Ternary
  } kind;
  int line = 0;
  Value literal;                // Literal
  std::string name;             // Name, Attr (attribute), Filter/Test (name), Unary/Binary (operator)
  ExprPtr a, b, c;              // operands: object/left/condition; index/right/then; slice step/else
  std::vector<ExprPtr> items;   // List, Tuple; Dict keys and values alternate
  std::vector<Arg> args;        // Call, Filter, Test
  bool negated = false;         // Test: "is not"
  Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue } kind;
  int line = 0;
  std::string text;                   // Text
  ExprPtr expr;                       // Output, Set value, If/For/CallBlock expression, FilterBlock filter
  std::vector<std::string> targets;   // For/Set targets (tuple unpacking); Set "ns.attr" as {"ns", "attr"} with attr_target
  bool attr_target = false;
  ExprPtr condition;                  // For ... if condition
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body); else has a null condition
  Body body, else_body;
  std::string name;                   // Macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro and call-block parameters with defaults
  Stmt(Kind k, int l) : kind(k), line(l) {}
};

struct Template {
  Body body;
};

// Parses Jinja source with Hugging Face's settings (trim_blocks, lstrip_blocks). Throws TemplateError
// naming the line and the problem.
std::shared_ptr<Template> parse_template(const std::string& source);

}  // namespace ftllm::jinja
