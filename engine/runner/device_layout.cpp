#include "device_layout.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "../core/error.h"
#include "../core/mapped_file.h"
#include "../cpu/numa_topology.h"
#include "loader.h"

namespace ftllm {

void LoadNotes::add(const std::string& note) {
  std::lock_guard lock(mu_);
  if (!note.empty()) text_ += (text_.empty() ? "" : "; ") + note;
}

std::string LoadNotes::text() const {
  std::lock_guard lock(mu_);
  return text_;
}

namespace {

std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", double(bytes) / double(uint64_t(1) << 30));
  return s;
}

std::string share_text(double share) { return std::to_string(share).substr(0, 4); }

// The model's compute threads, as many as the machine has cores free for them (a busy neighbour's core
// left out: thread_pool.h says why).
std::unique_ptr<cpu::ThreadPool> plain_pool(int threads) {
  auto pool = std::make_unique<cpu::ThreadPool>(threads);
  pool->adapt_to_machine_load();
  return pool;
}

}  // namespace

DeviceLayout::DeviceLayout(model::DecoderModel& model, kvcache::KvPool& kv, const ModelLoadOptions& options, int64_t context,
                           LoadNotes& notes)
    : model_(model),
      kv_(kv),
      options_(options),
      context_(context),
      notes_(notes),
      kernels_(cpu::kernels_named(options.kernels)),
      pool_(plain_pool(options.threads)),
      experts_device_(options.moe_device.starts_with("cuda")
                          ? Placement::parse(options.moe_device, 1).ranges()[0].device.compute_device()
                          : Device::cpu()) {
  if (options.moe_device == "numa" && model.config().moe.num_experts > 0) {
    if (cpu::numa_nodes_with_cpus().size() > 1) experts_on_nodes_ = true;
    else notes_.add("--moe_device numa: this machine has one NUMA node, so the experts run as --moe_device cpu");
  }
}

void DeviceLayout::apply(const Placement& placement, int threads) {
  if (threads <= 0) threads = pool_->size();
  // NUMA mode: one pool whose threads are grouped by node, over weights whose rows are split the same way.
  // --moe_device numa alone: only the experts' rows are split, but the pool is grouped the same way.
  const bool numa_mode = placement.numa_mode();
  if (numa_mode || experts_on_nodes_) place_weights_on_nodes(!numa_mode);
  move_to_devices(placement);
  const bool grouped = numa_mode || experts_on_nodes_;
  if (threads != pool_->size() || grouped != (pool_->groups() > 1))
    pool_ = grouped ? std::make_unique<cpu::ThreadPool>(threads, split_nodes_) : plain_pool(threads);
  device_contexts_.clear();
  device_pools_.clear();
  layer_ctx_.clear();
  if (!placement.all_on_host()) {
    layer_ctx_.assign(size_t(model_.config().num_layers), nullptr);
    main_ctx_ = std::make_unique<ops::Context>(ops::Context{*pool_, kernels_});
    for (const LayerRange& r : placement.ranges()) {
      ops::Context* ctx = main_ctx_.get();
      if (r.device.kind != PlacedDevice::Kind::Cpu) {
        const std::string key = r.device.name();
        const bool numa_node = r.device.kind == PlacedDevice::Kind::NumaNode;
        // A GPU's layers keep the model's pool for what runs on the host beside them (experts).
        if (numa_node && !device_pools_.count(key))
          device_pools_[key] = std::make_unique<cpu::ThreadPool>(threads, r.device.index);
        if (!device_contexts_.count(key))
          device_contexts_[key] = std::make_unique<ops::Context>(
              ops::Context{numa_node ? *device_pools_[key] : *pool_, kernels_, r.device.compute_device()});
        ctx = device_contexts_[key].get();
      }
      for (int64_t l = r.first; l < r.first + r.count; ++l) layer_ctx_[size_t(l)] = ctx;
    }
  }
  placement_ = placement;
}

// Every step streams the host's weights. Mapped from the file they sit on 4 KiB pages, and a stream
// over those misses the TLB and restarts the hardware prefetchers at each page: copied once onto
// transparent huge pages, single decode on two threads of an AMD EPYC (Zen 4) went from 84.5 to 92.4
// tokens/s (0.5B Q4_0) and 72.0 to 83.4 (Q8_0), medians of alternated runs. The load checked that the
// weights fit in memory; their file's pages stay in the page cache, which the kernel reclaims as needed.
// Weights converted at load were made on huge pages already. At the first placement; not the host
// copies of layers split over GPUs (nothing computes with them), nor weights split over NUMA nodes.
void DeviceLayout::put_host_weights_on_huge_pages() {
  if (nodes_placed_ > 0) return;
  constexpr size_t kWorthIt = Tensor::kHugePageMinBytes, kChunk = kWorthIt;
  auto each_mapped_host_weight = [&](const std::function<void(Tensor&)>& fn) {
    auto visit = [&](Tensor& w) {
      if (!w.device.is_cuda() && w.bytes() >= kWorthIt && MappedFile::contains(w.data, w.bytes())) fn(w);
    };
    for (int64_t l = 0; l < model_.config().num_layers; ++l)
      if (!model_.is_split(l)) model_.move_layer(l, visit, model::kAttentionAndDense | model::kRoutedExperts | model::kSharedExperts);
    model_.move_head(visit);
  };
  uint64_t bytes = 0;
  each_mapped_host_weight([&](Tensor& w) { bytes += w.bytes(); });
  if (bytes == 0) return;
  if (bytes > available_memory("/")) {
    notes_.add("the weights stay mapped from the file (too little memory is available for a copy on huge pages)");
    return;
  }
  each_mapped_host_weight([&](Tensor& w) {
    Tensor copy = Tensor::resident_zeros(w.dtype, w.shape);
    const int64_t chunks = int64_t((w.bytes() + kChunk - 1) / kChunk);
    pool_->parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      const size_t from = size_t(c0) * kChunk, to = std::min(w.bytes(), size_t(c1) * kChunk);
      std::memcpy(copy.as<uint8_t>() + from, w.as<uint8_t>() + from, to - from);
    });
    MappedFile::release_pages(w.data, w.bytes());
    w = std::move(copy);
  });
}

void DeviceLayout::move_to_devices(const Placement& placement) {
  const model::ModelConfig& c = model_.config();
  const bool first_placement = !placed_;
  if (first_placement) layer_place_.assign(size_t(c.num_layers), PlacedDevice{});
  // Each layer's device, and its weights' own: a tensor-parallel layer keeps its own on the host (its
  // shards hold the slices it computes with).
  const std::vector<PlacedDevice> spec = placement.per_layer();
  std::vector<Device> target(size_t(c.num_layers)), own(size_t(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    target[size_t(l)] = spec[size_t(l)].compute_device();
    own[size_t(l)] = spec[size_t(l)].kind == PlacedDevice::Kind::TensorParallel ? Device::cpu() : target[size_t(l)];
  }
  // The routed experts stay where --moe_device says whatever the layer's device; shared experts follow
  // the layer onto a GPU with --cuda_se, else stay with the routed ones.
  const Device experts = experts_device_;
  auto unchanged = [&](int64_t l) { return !first_placement && spec[size_t(l)] == layer_place_[size_t(l)]; };
  struct Move {
    int64_t layer;
    Device to;
    unsigned parts;
  };
  std::vector<Move> moves;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (unchanged(l)) continue;  // the first placement also places the experts
    const Device d = target[size_t(l)];
    moves.push_back({l, own[size_t(l)], model::kAttentionAndDense});
    moves.push_back({l, experts, model::kRoutedExperts});
    moves.push_back({l, options_.cuda_se && d.is_cuda() ? d : experts, model::kSharedExperts});
  }
  const Device head = target.empty() ? Device::cpu() : target.back();  // the LM head runs where the last layer does

  // Before anything moves: what each GPU must take (bytes not there yet) against its share of free memory.
  std::map<int, uint64_t> weights;
  std::map<int, int64_t> kv_layers;
  for (const Move& m : moves)
    if (m.to.is_cuda())
      model_.move_layer(m.layer, [&](Tensor& t) { if (!(t.device == m.to)) weights[m.to.index] += t.bytes(); }, m.parts);
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (own[size_t(l)].is_cuda() && !(kv_.layer_storage(l).device == own[size_t(l)])) {
      if (kv_.recurrent(l)) weights[own[size_t(l)].index] += kv_.layer_storage(l).bytes();  // fixed: a state per sequence
      else ++kv_layers[own[size_t(l)].index];
    }
  if (head.is_cuda() && !(model_.head_device() == head))
    model_.move_head([&](Tensor& t) { if (!(t.device == head)) weights[head.index] += t.bytes(); });
  const int64_t per_sequence = (context_ + kKvBlockTokens - 1) / kKvBlockTokens;
  int64_t blocks = kv_.num_blocks();
  for (auto& [gpu, bytes] : weights) kv_layers[gpu];
  for (auto& [gpu, layers] : kv_layers) {
    const uint64_t free_now = ops::device_available_bytes(Device::cuda(gpu));
    const uint64_t budget = uint64_t(options_.gpu_memory * double(free_now));
    const uint64_t block_bytes = uint64_t(layers) * (kv_.layer_bytes() / uint64_t(kv_.num_blocks()));
    const uint64_t w = weights[gpu];
    if (w + block_bytes * uint64_t(blocks) <= budget) continue;
    // At load the KV cache shrinks to what fits there: whole sequences at the full context, at least one.
    const int64_t fit = block_bytes && w < budget ? int64_t((budget - w) / block_bytes) / per_sequence * per_sequence : 0;
    if (first_placement && layers > 0 && fit >= per_sequence) {
      blocks = std::min(blocks, fit);
      continue;
    }
    throw EngineError("the layers placed on cuda:" + std::to_string(gpu) + " need " + gib(w) + " of weights and " +
                      gib(block_bytes * uint64_t(blocks)) + " of KV cache, but --gpu_memory " + share_text(options_.gpu_memory) +
                      " of its " + gib(free_now) + " free is " + gib(budget) + "; place fewer layers there (as {'cuda:" +
                      std::to_string(gpu) + "':3,'cpu':1}), lower --ctx or --max_sequences, use a smaller --dtype, or raise --gpu_memory");
  }
  if (blocks < kv_.num_blocks()) {
    kv_ = make_kv_pool(options_, c, blocks);
    notes_.add("the KV cache holds " + std::to_string(blocks / per_sequence) + " sequences of " + std::to_string(context_) +
               " tokens (not " + std::to_string(options_.kv_sequences()) + "): that is what --gpu_memory " +
               share_text(options_.gpu_memory) + " of the GPU's free memory holds");
  }

  auto move_to = [](Device d) { return [d](Tensor& t) { t = ops::to_device(t, d); }; };
  for (const Move& m : moves) model_.move_layer(m.layer, move_to(m.to), m.parts);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (unchanged(l)) continue;
    // The layer's cached keys and values go with it, so running sequences carry on: a split layer's
    // pages are cut by KV heads to its shards' devices, and put together again when it is whole.
    if (model_.is_split(l)) {
      kv_.replace_layer(l, join_kv_shards(l));
      model_.join_layer(l);
    }
    const PlacedDevice& to = spec[size_t(l)];
    if (to.kind != PlacedDevice::Kind::TensorParallel) {
      kv_.replace_layer(l, ops::to_device(kv_.layer_storage(l), target[size_t(l)]));
    } else {
      std::vector<std::pair<Device, double>> devices;
      for (const PlacedDevice::Shard& s : to.shards) devices.emplace_back(s.device, s.share);
      split_kv(l, model_.split_layer(l, devices));
    }
    layer_place_[size_t(l)] = to;
  }
  placed_ = true;
  if (first_placement) put_host_weights_on_huge_pages();
  if (!(model_.head_device() == head)) model_.move_head(move_to(head));
  measure_memory();
}

// What sits where now, for status (read on other threads: computed here, between steps).
void DeviceLayout::measure_memory() {
  std::map<std::string, DeviceMemory> by;
  by["cpu"].device = "cpu";
  std::vector<const Tensor*> weights_now = model_.shard_tensors();
  for (auto& [name, t] : model_.named_tensors()) weights_now.push_back(t);
  for (const Tensor* t : weights_now) {
    auto& m = by[t->device.name()];
    m.device = t->device.name();
    m.weight_bytes += t->bytes();
  }
  for (int64_t l = 0; l < model_.config().num_layers; ++l) {
    std::vector<const Tensor*> pages;
    for (const Tensor& t : kv_.shards(l)) pages.push_back(&t);
    if (pages.empty()) pages.push_back(&kv_.layer_storage(l));
    for (const Tensor* t : pages) {
      auto& m = by[t->device.name()];
      m.device = t->device.name();
      m.kv_bytes += t->bytes();
    }
  }
  std::vector<DeviceMemory> memory{by["cpu"]};
  for (auto& [name, m] : by)
    if (name != "cpu") memory.push_back(m);
  std::lock_guard lock(memory_mu_);
  memory_ = std::move(memory);
}

std::vector<DeviceMemory> DeviceLayout::memory() const {
  std::lock_guard lock(memory_mu_);
  return memory_;
}

void DeviceLayout::split_kv(int64_t l, const std::vector<model::DecoderModel::ShardSpan>& spans) {
  // [kinds, blocks, slots, row] as rows of bytes; shard s takes its heads' bytes of each row, into rows
  // padded to whole words as the pool's are.
  const Tensor whole = ops::to_device(kv_.layer_storage(l), Device::cpu());
  const std::vector<int64_t> shape = kv_.layer_shape();
  const int64_t rows = shape[0] * shape[1] * shape[2], head_bytes = kv_.head_bytes();
  std::vector<Tensor> shards;
  for (const auto& span : spans) {
    const int64_t bytes = span.kv_heads * head_bytes;
    Tensor part = kvcache::KvPool::host_storage({shape[0], shape[1], shape[2], (bytes + 3) / 4});
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(reinterpret_cast<uint8_t*>(part.as<float>() + r * part.dim(3)),
                  reinterpret_cast<const uint8_t*>(whole.as<float>() + r * shape[3]) + span.kv_head0 * head_bytes, size_t(bytes));
    shards.push_back(ops::to_device(part, span.device));
  }
  kv_.set_shards(l, std::move(shards));
  kv_.replace_layer(l, Tensor::zeros_f32({0, 0, 0, shape[3]}));  // the whole pages are in the shards now
}

Tensor DeviceLayout::join_kv_shards(int64_t l) {
  const std::vector<int64_t> shape = kv_.layer_shape();
  Tensor whole = kvcache::KvPool::host_storage(shape);
  const int64_t rows = shape[0] * shape[1] * shape[2];
  int64_t at = 0;  // bytes into a row
  for (const Tensor& s : kv_.shards(l)) {
    const Tensor part = ops::to_device(s, Device::cpu());
    const int64_t w = part.dim(3), bytes = std::min(w * 4, kv_.row_bytes() - at);
    // A shard's row holds whole heads; its padding (when any) is not copied.
    const int64_t heads_bytes = bytes / kv_.head_bytes() * kv_.head_bytes();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(reinterpret_cast<uint8_t*>(whole.as<float>() + r * shape[3]) + at,
                  reinterpret_cast<const uint8_t*>(part.as<float>() + r * w), size_t(heads_bytes));
    at += heads_bytes;
  }
  kv_.set_shards(l, {});
  return whole;
}

void DeviceLayout::place_weights_on_nodes(bool experts_only) {
  const int done = experts_only ? 1 : 2;
  if (nodes_placed_ >= done) return;  // once: the rows stay where they are for later placements
  split_nodes_ = cpu::numa_nodes_with_cpus();
  // Experts placed before (--moe_device numa) move again with the rest: a copy each, the old one freed.
  model_.move_matrices([&](Tensor& w) { cpu::place_rows_on_nodes(w, split_nodes_); }, experts_only);
  nodes_placed_ = done;
}

}  // namespace ftllm
