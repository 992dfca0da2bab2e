// POST /v1/embeddings, in OpenAI's shape: `input` a string, an array of strings, an array of token ids or
// an array of such arrays (at most 2048 inputs); `encoding_format` float or base64 (little-endian
// float32, as the OpenAI SDKs ask by default); `dimensions` keeps the first N values, renormalised
// (Matryoshka-trained models such as Qwen3-Embedding). The body is parsed and its texts tokenized on a
// worker; the inputs then run as the model's requests; the answer is written on a worker again.
#include <simdjson.h>

#include <cmath>
#include <cstring>

#include "core/json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

constexpr size_t kMaxInputs = 2048;

std::string base64_floats(const std::vector<float>& v) {
  static const char* const kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // x86 and ARM Linux are little-endian, as the format is
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = uint32_t(uint8_t(bytes[i])) << 16 | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
    out += kDigits[n >> 18 & 63];
    out += kDigits[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kDigits[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[n & 63] : '=';
  }
  return out;
}

struct EmbeddingWork {
  std::optional<ApiError> error;
  std::shared_ptr<ModelHandle> model;
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
  int64_t dimensions = 0;  // 0: all
  ModelHandle::Embeddings result;
};

// The body into token-id inputs, or the error to answer.
void parse(const ApiContext& api, const std::string& body_text, EmbeddingWork& w) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(body_text);
  simdjson::dom::element body;
  if (parser.parse(text).get(body) || body.type() != simdjson::dom::element_type::OBJECT)
    return void(w.error = ApiError{400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json"});
  ApiError err;
  w.model = model_for(api, body, err);
  if (!w.model) return void(w.error = err);
  if (Status s = w.model->embedding_support(); !s.ok)
    return void(w.error = ApiError{400, s.message, "model", "invalid_request_error", "model_not_embedding"});
  std::string_view format = "float";
  if (!body["encoding_format"].error() && body["encoding_format"].get(format))
    return void(w.error = ApiError{400, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format"});
  if (format != "float" && format != "base64")
    return void(w.error = ApiError{400, "'encoding_format' must be \"float\" or \"base64\", not \"" + std::string(format) + "\"",
                                   "encoding_format"});
  w.base64 = format == "base64";
  if (!body["dimensions"].error() && !body["dimensions"].is_null()) {
    int64_t d = 0;
    if (body["dimensions"].get(d) || d < 1)
      return void(w.error = ApiError{400, "'dimensions' must be a positive integer", "dimensions"});
    w.dimensions = d;
  }
  simdjson::dom::element input;
  if (body["input"].get(input)) return void(w.error = ApiError{400, "'input' is required", "input"});
  auto add_text = [&](std::string_view s) {
    std::vector<int32_t> ids;  // special tokens added as the tokenizer's post-processor says (sentence-transformers' way)
    if (Status st = w.model->tokenize(s, true, true, ids); !st.ok) return w.error = ApiError{400, st.message, "input"}, false;
    w.inputs.push_back(std::move(ids));
    return true;
  };
  auto ids_of = [&](simdjson::dom::array a, std::vector<int32_t>& ids) {
    for (simdjson::dom::element t : a) {
      int64_t id;
      if (t.get(id) || id < 0 || id > INT32_MAX) return false;
      ids.push_back(int32_t(id));
    }
    return true;
  };
  const char* const kShape = "'input' must be a string, an array of strings, an array of token ids or an array of token-id arrays";
  std::string_view single;
  simdjson::dom::array list;
  if (!input.get(single)) {
    add_text(single);
  } else if (!input.get(list)) {
    if (list.size() == 0) return void(w.error = ApiError{400, "'input' is empty", "input"});
    if (list.size() > kMaxInputs)
      return void(w.error = ApiError{400, "'input' holds " + std::to_string(list.size()) + " inputs; at most " +
                                              std::to_string(kMaxInputs) + " per request", "input"});
    const simdjson::dom::element first = list.at(0);
    if (first.is_int64() || first.is_uint64()) {  // one input as token ids
      w.inputs.emplace_back();
      if (!ids_of(list, w.inputs.back())) return void(w.error = ApiError{400, kShape, "input"});
    } else {
      for (simdjson::dom::element item : list) {
        simdjson::dom::array ids;
        if (!item.get(single)) {
          if (!add_text(single)) return;
        } else if (!item.get(ids)) {
          w.inputs.emplace_back();
          if (!ids_of(ids, w.inputs.back())) return void(w.error = ApiError{400, kShape, "input"});
        } else {
          return void(w.error = ApiError{400, kShape, "input"});
        }
      }
    }
  } else {
    return void(w.error = ApiError{400, kShape, "input"});
  }
}

std::string render(const EmbeddingWork& w) {
  JsonWriter out;
  out.begin_object().key("object").string("list").key("data").begin_array();
  for (size_t i = 0; i < w.result.vectors.size(); ++i) {
    std::vector<float> v = w.result.vectors[i];
    if (w.dimensions > 0 && size_t(w.dimensions) < v.size()) {  // the first N, renormalised
      v.resize(size_t(w.dimensions));
      double norm = 0;
      for (float x : v) norm += double(x) * x;
      if (norm > 0)
        for (float& x : v) x = float(x / std::sqrt(norm));
    }
    out.begin_object().key("object").string("embedding").key("index").number(int64_t(i)).key("embedding");
    if (w.base64) {
      out.string(base64_floats(v));
    } else {
      out.begin_array();
      for (float x : v) out.number(double(x));
      out.end_array();
    }
    out.end_object();
  }
  const int64_t tokens = int64_t(w.result.prompt_tokens);
  out.end_array().key("model").string(w.model->name());
  out.key("usage").begin_object().key("prompt_tokens").number(tokens).key("total_tokens").number(tokens).end_object();
  out.end_object();
  return out.take();
}

void handle_embeddings(ApiContext& api, const std::shared_ptr<http::Exchange>& ex) {
  if (auto denied = check_key(api.config, ex->request())) return ex->respond(*denied);
  if (api.draining)
    return ex->respond(api_error({503, "this server is shutting down; send the request to another instance", "", "server_error",
                                  "shutting_down"}));
  auto work = std::make_shared<EmbeddingWork>();
  api.bridge.run_on_workers([&api, ex, work] { parse(api, ex->take_body(), *work); },
                            [&api, ex, work] {
                              if (ex->closed()) return;
                              if (work->error) return ex->respond(api_error(*work->error));
                              if (work->dimensions > 0 && work->dimensions > work->model->hidden_size())
                                return ex->respond(api_error({400, "'dimensions' is " + std::to_string(work->dimensions) +
                                                                       "; this model's embeddings have " +
                                                                       std::to_string(work->model->hidden_size()),
                                                              "dimensions"}));
                              auto post = api.bridge.weak_poster();
                              work->model->embed(std::move(work->inputs), [&api, ex, work, post](ModelHandle::Embeddings e) {
                                work->result = std::move(e);  // on the model's worker: the rest on ours
                                post([&api, ex, work] {
                                  if (ex->closed()) return;
                                  if (!work->result.status.ok)
                                    return ex->respond(api_error({400, work->result.status.message, "input"}));
                                  auto body = std::make_shared<std::string>();
                                  api.bridge.run_on_workers([work, body] { *body = render(*work); },
                                                            [ex, body] {
                                                              if (!ex->closed()) ex->respond(json_ok(std::move(*body)));
                                                            });
                                });
                              });
                            });
}

}  // namespace

void add_embedding_routes(http::Router& router, ApiContext& api) {
  router.add_async("POST", "/v1/embeddings", [&api](const auto& ex) { handle_embeddings(api, ex); });
}

}  // namespace ftllm::daemon
