// Syntax tree of the chat-template interpreter: expressions and statements as produced by the parser.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/template/jinja_builtins.h"
#include "tokenizer/template/jinja_value.h"

namespace minfer::jinja {

enum class ExprKind {
    Literal,  // value
    Name,     // name
    List,     // args: elements (a tuple when `tuple` is set)
    Dict,     // args: key0, value0, key1, value1, ...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], omitted parts are null
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name args[0], name is "-" or "+"
    Binary,   // args[0] name args[1], name is an arithmetic operator or "~"
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: a (possibly chained) comparison
    And,      // args[0] and args[1]
    Or,       // args[0] or args[1]
    Not,      // not args[0]
    Cond,     // args[0] if args[1] else args[2]; args[2] is null when there is no else
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    ExprKind kind = ExprKind::Literal;
    int line = 0;
    std::string name;
    Value value;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;  // Compare: == != < > <= >= in "not in"
    bool negated = false;          // Test: "is not"
    FilterFn filter = nullptr;     // Filter: resolved by the parser
    TestFn test = nullptr;         // Test: resolved by the parser
    bool tuple = false;            // List: written as a tuple
    int depth = 1;                 // levels of this tree, at most kMaxNesting (checked by the parser)
};

enum class NodeKind {
    Text,      // text
    Output,    // {{ exprs[0] }}
    If,        // exprs: conditions of if/elif; bodies: one per condition, plus the else body if present
    For,       // names: loop targets; exprs[0]: iterable, exprs[1]: optional filter (null when absent);
               // bodies[0]: body, bodies[1]: else body
    Set,       // names: targets (or names[0] with attr for "ns.attr"); exprs[0]: value
    SetBlock,  // names[0] = rendered bodies[0]
    Macro,     // names[0]: macro name, names[1..]: parameters; exprs: parameter defaults (null when none);
               // bodies[0]: body
    Break,
    Continue,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    NodeKind kind = NodeKind::Text;
    int line = 0;
    std::string text;
    std::vector<std::string> names;
    std::string attr;
    std::vector<ExprPtr> exprs;
    std::vector<Body> bodies;
};

}  // namespace minfer::jinja
