// ftllmctl load / unload / list: models come and go while the daemon serves.
#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "admin_wire.h"
#include "commands.h"
#include "load_options.h"
#include "json_fields.h"
#include "table.h"

namespace ftllm::client {

namespace {

// Sends a request; on failure prints the one-line reason and returns the exit code (0 on success).
int call(const CommandContext& ctx, const std::string& method, const std::string& target, const std::string& body,
         AdminReply& reply) {
  AdminFailure failure;
  if (!ctx.client.call(method, target, body, reply, failure)) {
    std::fprintf(stderr, "ftllmctl: %s\n", failure.message.c_str());
    return failure.not_running ? 3 : 4;
  }
  return 0;
}

// The daemon's error message from its JSON error envelope, or the raw body.
std::string error_message(const AdminReply& reply) {
  simdjson::dom::parser parser;
  simdjson::padded_string body(reply.body);
  std::string_view m;
  if (parser.parse(body)["error"]["message"].get(m) == simdjson::SUCCESS) return std::string(m);
  return reply.body;
}

}  // namespace

int cmd_load(const CommandContext& ctx, const std::vector<std::string>& args) {
  // The options are the admin API's load keys, by their flags (engine/load_options.h); values go out as
  // the JSON type the key takes, and the daemon checks their ranges.
  std::string model;
  std::map<std::string, std::string> body_fields;  // key -> JSON value
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const LoadOption* option = load_option_by_flag(a, kAdmin);
    if (option && option->type() == LoadOption::Type::Flag) {
      body_fields[option->key] = "true";
    } else if (option) {
      if (i + 1 >= args.size()) return std::fprintf(stderr, "ftllmctl: %s needs a value\n", a.c_str()), 2;
      const std::string& v = args[++i];
      if (option->type() == LoadOption::Type::String) {
        body_fields[option->key] = json_quote(v);
        continue;
      }
      const bool integer = option->type() == LoadOption::Type::Integer;
      if (integer ? !LoadOption::parse_integer(v) : !LoadOption::parse_number(v))
        return std::fprintf(stderr, "ftllmctl: %s needs a number, not %s\n", option->flags().c_str(), v.c_str()), 2;
      body_fields[option->key] = v;
    } else if (a.starts_with("-")) {
      return std::fprintf(stderr, "ftllmctl: load: unknown option %s\n", a.c_str()), 2;
    } else if (model.empty()) {
      model = a;
    } else {
      return std::fprintf(stderr, "ftllmctl: load takes one MODEL\n"), 2;
    }
  }
  if (model.empty())
    return std::fprintf(stderr, "usage: ftllmctl load MODEL\n%s\n", load_options_synopsis(kAdmin, 7).c_str()), 2;
  // The daemon resolves the path, so a relative one that exists here becomes absolute here, where the user
  // typed it; anything else (a repo id such as Org/Name, found in the Hugging Face cache) goes as typed.
  if (model[0] != '/' && access(model.c_str(), F_OK) == 0) {
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) model = std::string(cwd) + "/" + model;
  }
  std::string body = "{" + json_quote(admin::key::model) + ": " + json_quote(model);
  for (auto& [k, v] : body_fields) body += ", " + json_quote(k) + ": " + v;
  body += "}";
  // Newline-delimited progress events, shown as they come: a bar on a terminal, plain lines otherwise.
  const bool tty = isatty(STDOUT_FILENO);
  simdjson::dom::parser parser;
  int rc = 1;
  std::string last_error = "the daemon ended the load without saying how", pending;
  bool bar_open = false;
  auto handle_line = [&](const std::string& line) {
    if (line.empty()) return;
    if (ctx.json) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    simdjson::padded_string padded(line);
    simdjson::dom::element e;
    if (parser.parse(padded).get(e)) return;
    std::string_view event = field<std::string_view>(e, admin::key::event), name = field<std::string_view>(e, admin::key::name), message;
    if (ctx.json) {
      if (event == admin::event::loaded) rc = 0;
      if (event == admin::event::error && !e[admin::key::message].get(message)) last_error = message;
      return;
    }
    if (event == admin::event::loading) std::printf("loading %.*s\n", int(name.size()), name.data());
    if (event == admin::event::progress) {
      auto phase = field<std::string_view>(e, admin::key::phase);
      auto done = field<uint64_t>(e, admin::key::bytes_done), total = field<uint64_t>(e, admin::key::bytes_total);
      double share = total ? double(done) / double(total) : 0.0;
      if (tty) {
        std::string bar(size_t(share * 30), '#');
        bar.resize(30, '.');
        std::printf("\r  %-10.*s [%s] %5.1f%%  %.1f / %.1f MB", int(phase.size()), phase.data(), bar.c_str(), 100 * share,
                    double(done) / 1e6, double(total) / 1e6);
        bar_open = true;
      } else if (total) {
        std::printf("  %-10.*s %5.1f%%  %.1f / %.1f MB\n", int(phase.size()), phase.data(), 100 * share, double(done) / 1e6,
                    double(total) / 1e6);
      } else {
        std::printf("  %.*s\n", int(phase.size()), phase.data());
      }
    }
    if (event == admin::event::loaded || event == admin::event::error) {
      if (bar_open) std::printf("\n");
      bar_open = false;
    }
    if (event == admin::event::loaded) {
      const double ms = field<double>(e, admin::key::load_ms);
      if (ms < 1000) std::printf("loaded %.*s in %.1f ms\n", int(name.size()), name.data(), ms);
      else std::printf("loaded %.*s in %.2f s\n", int(name.size()), name.data(), ms / 1000);
      std::string_view notes;
      if (!e[admin::key::notes].get(notes)) std::printf("note: %.*s\n", int(notes.size()), notes.data());
      rc = 0;
    }
    if (event == admin::event::error && !e[admin::key::message].get(message)) last_error = message;
    std::fflush(stdout);
  };
  AdminReply reply;
  AdminFailure failure;
  bool ok = ctx.client.call("POST", admin::kModelsPath, body, reply, failure, [&](std::string_view chunk) {
    pending.append(chunk);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      handle_line(line);
    }
  });
  if (!ok) {
    std::fprintf(stderr, "ftllmctl: %s\n", failure.message.c_str());
    return failure.not_running ? 3 : 4;
  }
  if (reply.status != 200) {
    std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str());
    return 1;
  }
  handle_line(pending);
  if (rc != 0) std::fprintf(stderr, "ftllmctl: %s\n", last_error.c_str());
  return rc;
}

int cmd_unload(const CommandContext& ctx, const std::vector<std::string>& args) {
  std::string name;
  bool force = false;
  for (const std::string& a : args) {
    if (a == "--force") force = true;
    else if (a.starts_with("-")) return std::fprintf(stderr, "ftllmctl: unload: unknown option %s\n", a.c_str()), 2;
    else name = a;
  }
  if (name.empty()) return std::fprintf(stderr, "usage: ftllmctl unload NAME [--force]\n"), 2;
  AdminReply reply;
  if (int rc = call(ctx, "DELETE", std::string(admin::kModelPrefix) + name + (force ? "?force=1" : ""), "", reply)) return rc;
  if (reply.status != 200) {
    std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str());
    return 1;
  }
  if (ctx.json) {
    std::printf("%s\n", reply.body.c_str());
  } else {
    simdjson::dom::parser parser;
    simdjson::padded_string body(reply.body);
    simdjson::dom::element doc;
    int64_t running = parser.parse(body).get(doc) ? 0 : field<int64_t>(doc, admin::key::requests_running);
    std::printf("unloaded %s%s\n", name.c_str(),
                running == 0 ? "" : force ? " (its running requests were ended)" : " (its running requests finish first)");
  }
  return 0;
}

int cmd_rebalance(const CommandContext& ctx, const std::vector<std::string>& args) {
  std::string name, threads, device;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "-t" || a == "--threads" || a == "--device") && i + 1 < args.size()) (a == "--device" ? device : threads) = args[++i];
    else if (a.starts_with("-")) return std::fprintf(stderr, "ftllmctl: rebalance: unknown option %s\n", a.c_str()), 2;
    else name = a;
  }
  if (name.empty() || (threads.empty() && device.empty()))
    return std::fprintf(stderr, "usage: ftllmctl rebalance NAME [-t N] [--device cpu|numa|numa:N|{'cpu':1,'numa:0':1}]\n"), 2;
  if (!threads.empty() && threads.find_first_not_of("0123456789") != std::string::npos)
    return std::fprintf(stderr, "ftllmctl: -t needs a number, not %s\n", threads.c_str()), 2;
  std::string body = "{";
  if (!threads.empty()) body += json_quote(admin::key::threads) + ": " + threads;
  if (!device.empty()) body += std::string(threads.empty() ? "" : ", ") + json_quote(admin::key::device) + ": " + json_quote(device);
  body += "}";
  AdminReply reply;
  if (int rc = call(ctx, "POST", std::string(admin::kModelPrefix) + name + admin::kRebalanceSuffix, body, reply)) return rc;
  if (reply.status != 200) {
    std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str());
    return 1;
  }
  if (ctx.json) return std::printf("%s\n", reply.body.c_str()), 0;
  std::printf("rebalanced %s%s%s\n", name.c_str(), threads.empty() ? "" : (" to " + threads + " threads").c_str(),
              device.empty() ? "" : (" on " + device).c_str());
  simdjson::dom::parser parser;
  simdjson::padded_string padded(reply.body);
  simdjson::dom::element doc;
  std::string_view note;
  if (!parser.parse(padded).get(doc) && !doc[admin::key::notes].get(note)) std::printf("note: %.*s\n", int(note.size()), note.data());
  return 0;
}

int cmd_list(const CommandContext& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) return std::fprintf(stderr, "ftllmctl: list takes no arguments\n"), 2;
  AdminReply reply;
  if (int rc = call(ctx, "GET", admin::kModelsPath, "", reply)) return rc;
  if (reply.status != 200) {
    std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str());
    return 1;
  }
  if (ctx.json) return std::printf("%s\n", reply.body.c_str()), 0;
  simdjson::dom::parser parser;
  simdjson::padded_string body(reply.body);
  simdjson::dom::array models;
  if (parser.parse(body)["models"].get(models)) return std::fprintf(stderr, "ftllmctl: the daemon's reply has no models list\n"), 1;
  if (models.size() == 0) return std::printf("no models loaded (load one with: ftllmctl load MODEL)\n"), 0;
  Table t({"MODEL", "ARCHITECTURE", "PLACEMENT", "THREADS", "RUNNING", "WAITING", "KV USED", "SOURCE"});
  for (auto m : models) {
    auto name = field<std::string_view>(m, admin::key::name), arch = field<std::string_view>(m, admin::key::architecture),
         source = field<std::string_view>(m, admin::key::source);
    auto running = field<int64_t>(m, admin::key::requests_running), waiting = field<int64_t>(m, admin::key::requests_waiting),
         used = field<int64_t>(m, admin::key::kv_blocks_used), total = field<int64_t>(m, admin::key::kv_blocks_total);
    std::string placement = placement_text(m);
    t.add({std::string(name), std::string(arch), placement,
           threads_text(m), std::to_string(running), std::to_string(waiting),
           total ? std::to_string(used * 100 / total) + "%" : "-", std::string(source)});
    simdjson::dom::array adapters;
    if (!m[admin::key::adapters].get(adapters))
      for (auto a : adapters)
        t.add({"  " + std::string(field<std::string_view>(a, admin::key::name)), "LoRA of " + std::string(name), "", "", "", "", "",
               std::string(field<std::string_view>(a, admin::key::path))});
  }
  std::fputs(t.render().c_str(), stdout);
  return 0;
}

// ftllmctl load-adapter BASE PATH [--name NAME]: a PEFT LoRA adapter onto a resident model.
int cmd_load_adapter(const CommandContext& ctx, const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  std::string name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--name" && i + 1 < args.size()) name = args[++i];
    else if (args[i].starts_with("-")) return std::fprintf(stderr, "ftllmctl: load-adapter: unknown option %s\n", args[i].c_str()), 2;
    else positional.push_back(args[i]);
  }
  if (positional.size() != 2) return std::fprintf(stderr, "usage: ftllmctl load-adapter BASE PATH [--name NAME]\n"), 2;
  // The daemon reads the path: make it absolute here, where it was typed.
  std::error_code ec;
  const std::string path = std::filesystem::absolute(positional[1], ec).lexically_normal().string();
  if (name.empty()) name = std::filesystem::path(path).filename().string();
  const std::string body = "{" + json_quote(admin::key::model) + ": " + json_quote(positional[0]) + ", " + json_quote(admin::key::path) +
                           ": " + json_quote(path) + ", " + json_quote(admin::key::name) + ": " + json_quote(name) + "}";
  AdminReply reply;
  if (int rc = call(ctx, "POST", admin::kAdaptersPath, body, reply)) return rc;
  if (reply.status != 200) return std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str()), 1;
  if (ctx.json) return std::printf("%s\n", reply.body.c_str()), 0;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(reply.body);
  simdjson::dom::element doc;
  if (parser.parse(padded).get(doc)) return std::printf("loaded adapter %s onto %s\n", name.c_str(), positional[0].c_str()), 0;
  const auto targets = field<std::string_view>(doc, admin::key::targets);
  std::printf("loaded adapter %s onto %s (rank %lld: %.*s) in %.0f ms; request it as \"model\": \"%s\"\n", name.c_str(),
              positional[0].c_str(), (long long)field<int64_t>(doc, admin::key::rank), int(targets.size()), targets.data(),
              field<double>(doc, admin::key::load_ms), name.c_str());
  return 0;
}

int cmd_unload_adapter(const CommandContext& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].starts_with("-")) return std::fprintf(stderr, "usage: ftllmctl unload-adapter NAME\n"), 2;
  AdminReply reply;
  if (int rc = call(ctx, "DELETE", std::string(admin::kAdapterPrefix) + args[0], "", reply)) return rc;
  if (reply.status != 200) return std::fprintf(stderr, "ftllmctl: %s\n", error_message(reply).c_str()), 1;
  if (ctx.json) return std::printf("%s\n", reply.body.c_str()), 0;
  std::printf("unloaded adapter %s (its running requests finish first)\n", args[0].c_str());
  return 0;
}

const RegisteredCommand load_adapter_command({53, "load-adapter", [] {
  return std::string("  load-adapter BASE PATH [--name NAME]\n"
                     "                                serve a PEFT LoRA adapter over a resident model, as model NAME\n");
}, &cmd_load_adapter});

const RegisteredCommand unload_adapter_command({56, "unload-adapter", [] {
  return std::string("  unload-adapter NAME           stop serving an adapter (running requests finish)\n");
}, &cmd_unload_adapter});

const RegisteredCommand list_command({20, "list", [] {
  return std::string("  list                          resident models with their load\n");
}, &cmd_list});

const RegisteredCommand load_command({30, "load", [] {
  return std::string("  load MODEL\n" + load_options_synopsis(kAdmin, 7) +
         "\n                                load a model while the daemon serves\n");
}, &cmd_load});

const RegisteredCommand unload_command({40, "unload", [] {
  return std::string("  unload NAME [--force]         stop serving a model (running requests finish, or end with --force)\n");
}, &cmd_unload});

const RegisteredCommand rebalance_command({50, "rebalance", [] {
  return std::string("  rebalance NAME [-t N] [--device SPEC]\n"
         "                                change a model's placement live; requests in flight carry on\n");
}, &cmd_rebalance});

}  // namespace ftllm::client
