#include "runtime/graph_signature.h"

#include <algorithm>
#include <bit>

#include "compiler/kernel_program.h"

namespace lt::runtime {

namespace {

// The one definition of a record's layout, used by the encoder and the decoder alike.
struct RecordHeader {
  ir::OpKind op;
  DType dtype;
  int rank;
  int num_operands;
  int num_attrs;

  uint64_t encode() const {
    return static_cast<uint64_t>(op) | static_cast<uint64_t>(dtype) << 16 |
           static_cast<uint64_t>(rank) << 24 | static_cast<uint64_t>(num_operands) << 32 |
           static_cast<uint64_t>(num_attrs) << 48;
  }
  static RecordHeader decode(uint64_t word) {
    return {static_cast<ir::OpKind>(word & 0xffff), static_cast<DType>(word >> 16 & 0xff),
            static_cast<int>(word >> 24 & 0xff), static_cast<int>(word >> 32 & 0xffff),
            static_cast<int>(word >> 48 & 0xffff)};
  }
  size_t length() const { return 1 + rank + num_operands + num_attrs; }
};

// Ends the node records: no record header has the op bits all set.
constexpr uint64_t kOutputsMarker = 0xffff;

struct Record {
  size_t begin = 0;  // the header's position
  RecordHeader header;
  size_t sizes_begin = 0;  // its first symbolic size in GraphSignature::sizes
  const uint64_t* dims(const GraphSignature& s) const { return &s.words[begin + 1]; }
  const uint64_t* attrs(const GraphSignature& s) const {
    return &s.words[begin + 1 + header.rank + header.num_operands];
  }
};

std::vector<Record> decode_records(const GraphSignature& signature) {
  std::vector<Record> out;
  const auto& w = signature.words;
  size_t sizes = 0;
  for (size_t i = 1; i < w.size() && w[i] != kOutputsMarker;) {
    Record r{i, RecordHeader::decode(w[i]), sizes};
    out.push_back(r);
    const uint64_t* dims = r.dims(signature);
    const uint64_t* attrs = r.attrs(signature);
    sizes += static_cast<size_t>(std::count(dims, dims + r.header.rank, kSymbolicSize));
    for (int k = 0; k < r.header.num_attrs; ++k) {
      sizes += ir::is_size_attr(r.header.op, k) && attrs[k] == kSymbolicSize;
    }
    i += r.header.length();
  }
  return out;
}

// A record's shape with its sizes' values (the symbolic dims come first among its sizes).
std::string shape_string(const GraphSignature& s, const Record& r) {
  std::string out = "[";
  size_t next = r.sizes_begin;
  for (int d = 0; d < r.header.rank; ++d) {
    const uint64_t dim = r.dims(s)[d];
    const int64_t value = dim != kSymbolicSize    ? static_cast<int64_t>(dim)
                          : next < s.sizes.size() ? s.sizes[next++]
                                                  : -1;
    out += (d ? ", " : "") + std::to_string(value);
  }
  return out + "]";
}

// Node -> position in the graph being built: open addressing over pointers, much cheaper per
// node than std::unordered_map (this runs for every node of every step). One per thread,
// reused from cut to cut, so that a steady training loop allocates nothing here.
class PositionMap {
 public:
  static constexpr uint32_t kAbsent = ~uint32_t{0};
  PositionMap() : slots_(size_t{1} << kInitialBits) {}

  // Empties the map in time proportional to what it held, and gives back the memory a much
  // larger graph once needed.
  void reset() {
    if (slots_.size() > 16 * std::max<size_t>(used_.size(), size_t{1} << kInitialBits)) {
      slots_.assign(size_t{1} << kInitialBits, Slot{});
      shift_ = 64 - kInitialBits;
    } else {
      for (size_t i : used_) slots_[i] = Slot{};
    }
    used_.clear();
  }

  // Inserts `node` with `value` if absent; returns whether it was.
  bool insert(const ir::Node* node, uint32_t value) {
    if (2 * (used_.size() + 1) > slots_.size()) grow();
    Slot& slot = find(node);
    if (slot.node) return false;
    slot = {node, value};
    used_.push_back(static_cast<size_t>(&slot - slots_.data()));
    return true;
  }
  uint32_t& at(const ir::Node* node) { return find(node).value; }

 private:
  struct Slot {
    const ir::Node* node = nullptr;
    uint32_t value = kAbsent;
  };
  // Fibonacci hashing: the product's top bits index the table.
  Slot& find(const ir::Node* node) {
    const size_t mask = slots_.size() - 1;
    size_t i = reinterpret_cast<uintptr_t>(node) * 0x9e3779b97f4a7c15ull >> shift_;
    while (slots_[i].node && slots_[i].node != node) i = (i + 1) & mask;
    return slots_[i];
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    --shift_;
    used_.clear();
    for (const Slot& slot : old) {
      if (!slot.node) continue;
      Slot& moved = find(slot.node);
      moved = slot;
      used_.push_back(static_cast<size_t>(&moved - slots_.data()));
    }
  }
  static constexpr int kInitialBits = 12;
  std::vector<Slot> slots_;
  std::vector<size_t> used_;  // occupied slots
  int shift_ = 64 - kInitialBits;
};

}  // namespace

void build_graph(const std::vector<const ir::Node*>& roots, uint64_t prefix, ir::Graph& graph,
                 GraphSignature& signature, std::vector<uint32_t>& root_outputs,
                 bool symbolic_sizes) {
  thread_local PositionMap position;
  position.reset();
  std::vector<uint64_t>& words = signature.words;
  std::vector<int64_t>& sizes = signature.sizes;
  // A size is kept when `kept` says so: a dim of 0 or 1 (broadcasting and empty values depend
  // on it), a view's stride of 0 (an expanded dim); a view's offset never is.
  const auto push_size = [&](int64_t size, bool kept) {
    if (!symbolic_sizes || kept) {
      words.push_back(static_cast<uint64_t>(size));
    } else {
      words.push_back(kSymbolicSize);
      sizes.push_back(size);
    }
  };
  words.push_back(prefix);
  graph.operand_begin.push_back(0);
  std::vector<std::pair<const ir::Node*, int>> stack;  // node, next operand to visit
  constexpr uint32_t kOnStack = PositionMap::kAbsent;
  for (const ir::Node* root : roots) {
    if (!position.insert(root, kOnStack)) continue;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->num_operands()) {
        const ir::Node* operand = node->operands[next++].get();
        if (position.insert(operand, kOnStack)) stack.emplace_back(operand, 0);
        continue;
      }
      const auto index = static_cast<uint32_t>(graph.nodes.size());
      position.at(node) = index;
      graph.nodes.push_back(node);
      if (node->op == ir::OpKind::DeviceData) graph.inputs.push_back(index);
      if (node->op == ir::OpKind::Scalar) graph.scalars.push_back(index);
      const RecordHeader header{node->op, node->dtype, node->shape.rank(), node->num_operands(),
                                static_cast<int>(node->attrs.size())};
      words.push_back(header.encode());
      for (int64_t dim : node->shape) push_size(dim, dim == 0 || dim == 1);
      for (int k = 0; k < node->num_operands(); ++k) {
        const uint32_t operand = position.at(node->operands[k].get());
        graph.operand_ids.push_back(operand);
        words.push_back(operand);
      }
      int attr_index = 0;
      node->attrs.for_each([&](int64_t attr) {
        const int k = attr_index++;
        if (!ir::is_size_attr(node->op, k)) {
          words.push_back(static_cast<uint64_t>(attr));
        } else if (node->op == ir::OpKind::View) {
          push_size(attr, k > 0 && attr == 0);
        } else {
          push_size(attr, attr == 0 || attr == 1);
        }
      });
      graph.operand_begin.push_back(static_cast<uint32_t>(graph.operand_ids.size()));
      stack.pop_back();
    }
  }
  words.push_back(kOutputsMarker);
  std::vector<int32_t> output_of(graph.nodes.size(), -1);
  root_outputs.clear();
  for (const ir::Node* root : roots) {
    const uint32_t index = position.at(root);
    if (output_of[index] < 0) {
      output_of[index] = static_cast<int32_t>(graph.outputs.size());
      graph.outputs.push_back(index);
      words.push_back(index);
    }
    root_outputs.push_back(static_cast<uint32_t>(output_of[index]));
  }
  signature.hash = compiler::hash_bytes(words.data(), words.size() * sizeof(uint64_t));
  signature.sizes_hash = compiler::hash_bytes(sizes.data(), sizes.size() * sizeof(int64_t));
}

namespace {

// How many values a graph reads (device data), computes and leaves as outputs.
struct GraphCounts {
  int64_t inputs = 0, computed = 0, outputs = 0;
};

GraphCounts count(const GraphSignature& s, const std::vector<Record>& records) {
  GraphCounts c;
  for (const Record& r : records) {
    if (r.header.op == ir::OpKind::DeviceData) {
      ++c.inputs;
    } else if (!ir::is_leaf(r.header.op)) {
      ++c.computed;
    }
  }
  const size_t end = records.empty() ? 1 : records.back().begin + records.back().header.length();
  c.outputs = static_cast<int64_t>(s.words.size()) - static_cast<int64_t>(end) - 1;
  return c;
}

// What the difference most likely means, in the words of a training loop.
std::string likely_cause(const GraphCounts& now, const GraphCounts& cached) {
  if (now.inputs > cached.inputs && now.computed < cached.computed) {
    return std::to_string(now.inputs - cached.inputs) +
           " more values are read as device data and " +
           std::to_string(cached.computed - now.computed) +
           " fewer ops computed than in the nearest cached graph: what an earlier step "
           "created (parameters initialized when first used, an optimizer's state, a cached "
           "copy) is now an input instead of being computed. Expected once or twice at the "
           "start of training, not every step";
  }
  if (now.outputs != cached.outputs) {
    return "this cut leaves " + std::to_string(now.outputs) +
           " tensors to compute where the "
           "nearest cached graph left " +
           std::to_string(cached.outputs) +
           " (a tensor kept alive from another step, new state, or a different set of live "
           "tensors)";
  }
  if (now.inputs == cached.inputs && now.computed == cached.computed) {
    return "the same ops as a cached graph on values of another dtype, or with a size that "
           "became 0 or 1 or stopped being one (sizes are symbolic except 0 and 1, on which "
           "broadcasting and empty values depend)";
  }
  return "a different computation from any cached graph (" + std::to_string(now.computed) +
         " ops on " + std::to_string(now.inputs) + " inputs; the nearest has " +
         std::to_string(cached.computed) + " on " + std::to_string(cached.inputs) + ")";
}

}  // namespace

namespace {

std::string first_difference(const GraphSignature& now, const GraphSignature& cached,
                             const std::vector<Record>& a, const std::vector<Record>& b,
                             size_t& node) {
  node = std::min(a.size(), b.size()) == 0 ? 0 : std::min(a.size(), b.size()) - 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const Record& x = a[i];
    const Record& y = b[i];
    if (std::equal(now.words.begin() + x.begin, now.words.begin() + x.begin + x.header.length(),
                   cached.words.begin() + y.begin,
                   cached.words.begin() + y.begin + y.header.length())) {
      continue;
    }
    node = i;
    const char* op_now = ir::op_info(x.header.op).name;
    const std::string where = "node " + std::to_string(i) + " (" + op_now + ")";
    if (x.header.op != y.header.op) {
      return where + ": op changed from " + ir::op_info(y.header.op).name + " to " + op_now;
    }
    if (x.header.dtype != y.header.dtype) {
      return where + ": dtype changed from " + dtype_name(y.header.dtype) + " to " +
             dtype_name(x.header.dtype);
    }
    // The dims' words: a symbolic size equals any other; its value is only context.
    if (x.header.rank != y.header.rank ||
        !std::equal(x.dims(now), x.dims(now) + x.header.rank, y.dims(cached))) {
      return where + ": shape changed from " + shape_string(cached, y) + " to " +
             shape_string(now, x);
    }
    if (x.header.num_operands != y.header.num_operands ||
        !std::equal(x.dims(now) + x.header.rank, x.attrs(now), y.dims(cached) + y.header.rank)) {
      return where + ": operands changed (a different graph topology)";
    }
    if (x.header.op == ir::OpKind::Constant) {
      return where + ": constant value changed from " +
             std::to_string(std::bit_cast<double>(y.attrs(cached)[0])) + " to " +
             std::to_string(std::bit_cast<double>(x.attrs(now)[0])) +
             " (constants are baked into the graph; the argument scalar policy avoids this)";
    }
    return where + ": attributes changed" +
           (ir::is_reduction(x.header.op) ? std::string(" (reduced dims or keepdim)") : "");
  }
  if (a.size() != b.size()) {
    return "the graph has " + std::to_string(a.size()) + " nodes, the nearest cached one " +
           std::to_string(b.size()) + "; the first " +
           std::to_string(std::min(a.size(), b.size())) + " agree";
  }
  return "the same nodes with different outputs (other tensors are live or pending)";
}

}  // namespace

std::string describe_difference(const GraphSignature& now, const GraphSignature& cached,
                                size_t* node) {
  if (now.words.empty() || cached.words.empty() || now.words[0] != cached.words[0]) {
    return "the graph is for another device or kernel compiler";
  }
  const std::vector<Record> a = decode_records(now), b = decode_records(cached);
  size_t differing = 0;
  std::string where = first_difference(now, cached, a, b, differing);
  if (node) *node = differing;
  return likely_cause(count(now, a), count(cached, b)) + "; the first difference: " + where;
}

}  // namespace lt::runtime
