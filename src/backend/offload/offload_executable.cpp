#include "backend/offload/offload_executable.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_source.h"
#include "backend/offload/routines.h"
#include "compiler/fusion.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt::backend::offload {

namespace {

using compiler::ReduceKind;

// Work-items per work-group of the looping kernels. Fixed, not the driver's choice: PoCL
// compiles a kernel once per work-group size, and its choice follows the grid, so that every new
// size of a tensor built the kernel again (minutes of a cold cache for the dynamic-sizes suite).
constexpr size_t kGroup = 64;

// Work-items for `n` elements, whole work-groups: the kernels loop, so a bounded grid covers
// any n.
size_t grid_for(int64_t n) {
  const auto items = static_cast<size_t>(std::clamp<int64_t>(n, 1, int64_t{1} << 16));
  return (items + kGroup - 1) / kGroup * kGroup;
}

const char* index_op_name(ir::OpKind op) {
  switch (op) {
    case ir::OpKind::IndexSelect:
      return "index_select (embedding)";
    case ir::OpKind::IndexAdd:
      return "index_add";
    default:
      return "cross_entropy";
  }
}

// A kernel's arguments, set in order.
class Arguments {
 public:
  Arguments(const Runtime& device, void* kernel) : device_(device), kernel_(kernel) {}
  Arguments& buffer(void* mem) {
    device_.set_arg(kernel_, next_++, sizeof mem, &mem);
    return *this;
  }
  template <class T>
  Arguments& value(T v) {
    device_.set_arg(kernel_, next_++, sizeof v, &v);
    return *this;
  }
  Arguments& long8(const int64_t* v) {
    device_.set_arg(kernel_, next_++, 8 * sizeof(int64_t), v);
    return *this;
  }

 private:
  const Runtime& device_;
  void* kernel_;
  int next_ = 0;
};

// What one run of an executable holds until the device is done with it.
struct RunState {
  const Runtime& device;
  const OffloadExecutable& exe;
  const std::function<BufferPtr(size_t)>& allocate;
  std::vector<void*> slots;
  std::vector<BufferPtr> temporaries;  // the plan's, for the whole run
  // One launch's copies and values to fold. Released after the launch is queued: a runtime frees
  // a buffer once the commands queued on it have run.
  std::vector<BufferPtr> held;
  std::vector<std::shared_ptr<std::vector<double>>> host_scalars;
  // The index checks' results: {launch, status buffer, host copy}.
  struct Check {
    size_t launch;
    BufferPtr status;
    int64_t result[2] = {-1, 0};
  };
  std::vector<Check> checks;

  void* scratch(size_t bytes) {
    held.push_back(allocate(bytes));
    return held.back()->data();
  }

  // `n` elements of `sizes` read through `strides` from `offset` of `src`, into dst (from
  // dst_offset, through dst_strides; contiguous when null).
  void copy(void* src, size_t element_size, int rank, const int64_t* sizes, const int64_t* strides,
            int64_t offset, void* dst, const int64_t* dst_strides = nullptr,
            int64_t dst_offset = 0) {
    int64_t n = 1;
    int64_t size8[8] = {}, src8[8] = {}, dst8[8] = {};
    for (int d = 0; d < rank; ++d) {
      size8[d] = sizes[d];
      src8[d] = strides[d];
      n *= sizes[d];
    }
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      dst8[d] = dst_strides ? dst_strides[d] : stride;
      stride *= sizes[d];
    }
    if (n == 0) return;
    void* kernel = exe.copy[element_size];
    Arguments(device, kernel)
        .buffer(src)
        .buffer(dst)
        .value<int64_t>(n)
        .value<int32_t>(rank)
        .long8(size8)
        .long8(src8)
        .value<int64_t>(offset)
        .long8(dst8)
        .value<int64_t>(dst_offset);
    device.launch(kernel, grid_for(n), kGroup);
  }

  // The operand's elements, contiguous: its own buffer where they are laid out so.
  void* contiguous(const StridedOperand& x) {
    void* buffer = slots[x.slot];
    if (is_contiguous(x) && x.offset == 0) return buffer;
    const size_t size = dtype_size(x.dtype);
    void* dst = scratch(static_cast<size_t>(x.shape.numel()) * size);
    copy(buffer, size, x.shape.rank(), x.shape.begin(), x.strides, x.offset, dst);
    return dst;
  }

  void check_ids(size_t launch, void* kernel, const StridedOperand& ids, int64_t size,
                 std::optional<int64_t> ignore) {
    checks.push_back({launch, allocate(2 * sizeof(int64_t))});
    Arguments(device, kernel)
        .buffer(slots[ids.slot])
        .value<int64_t>(ids.offset)
        .value<int64_t>(ids.shape.rank() == 0 ? 0 : ids.strides[0])
        .value<int64_t>(ids.shape.numel())
        .value<int64_t>(size)
        .value<int64_t>(ignore.value_or(0))
        .value<int32_t>(ignore ? 1 : 0)
        .buffer(checks.back().status->data());
    device.launch(kernel, 1, 1);
  }

  void run_kernel(const Launch& launch, const std::vector<double>& scalars);
  void run_opaque(size_t index, const Launch& launch);
};

void RunState::run_kernel(const Launch& launch, const std::vector<double>& scalars) {
  const compiler::KernelProgram& program = *launch.program;
  const bool by_value = device.scalars_by_value(program);
  for (const Instance& inst : launch.instances) {
    if (inst.numel > 0) {
      Arguments args(device, launch.kernel);
      for (const InputAccess& in : inst.inputs) {
        const bool direct = in.direct && in.offset == 0;
        void* mem = slots[in.slot];
        if (!direct) {
          void* dst = scratch(static_cast<size_t>(inst.numel) * in.elem_size);
          copy(mem, in.elem_size, inst.rank, inst.sizes, in.strides, in.offset, dst);
          mem = dst;
        }
        args.buffer(mem);
      }
      void* values = nullptr;
      if (launch.reduce == ReduceKind::None) {
        for (int slot : inst.output_slots) args.buffer(slots[slot]);
      } else {
        values = scratch(static_cast<size_t>(inst.numel) * dtype_size(launch.value_dtype));
        args.buffer(values);
      }
      if (by_value) {
        for (uint32_t s : inst.scalar_args) args.value<double>(scalars[s]);
      } else {
        auto host = std::make_shared<std::vector<double>>();
        for (uint32_t s : inst.scalar_args) host->push_back(scalars[s]);
        host_scalars.push_back(host);
        void* mem = scratch(host->size() * sizeof(double));
        device.write(mem, host->data(), host->size() * sizeof(double), false);
        args.buffer(mem);
      }
      args.value<int64_t>(0).value<int64_t>(inst.numel);
      device.launch(launch.kernel, grid_for(inst.numel), kGroup);
      if (launch.reduce == ReduceKind::None) continue;
      Arguments(device, launch.fold)
          .buffer(values)
          .buffer(slots[inst.output_slots[0]])
          .value<int64_t>(inst.outer)
          .value<int64_t>(inst.inner)
          .value<int32_t>(static_cast<int32_t>(launch.reduce));
      device.launch(launch.fold,
                    Routines::kFoldLanes * grid_for(std::min<int64_t>(inst.outer, 1024)),
                    Routines::kFoldLanes);
    } else if (launch.reduce != ReduceKind::None && inst.outer > 0) {
      // Folds of nothing: each output is the empty fold.
      void* values = scratch(dtype_size(launch.value_dtype));
      Arguments(device, launch.fold)
          .buffer(values)
          .buffer(slots[inst.output_slots[0]])
          .value<int64_t>(inst.outer)
          .value<int64_t>(0)
          .value<int32_t>(static_cast<int32_t>(launch.reduce));
      device.launch(launch.fold,
                    Routines::kFoldLanes * grid_for(std::min<int64_t>(inst.outer, 1024)),
                    Routines::kFoldLanes);
    }
  }
}

void RunState::run_opaque(size_t index, const Launch& launch) {
  const OpaqueOp& op = *launch.opaque;
  void* out = slots[op.output_slot];
  switch (op.op) {
    case ir::OpKind::MatMul: {
      const StridedOperand &a = op.operands[0], &b = op.operands[1];
      const int ra = a.shape.rank(), rb = b.shape.rank(), rc = op.output_shape.rank();
      const int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
      const int nbatch = rc - 2;
      // Each operand as [batches..., rows, cols], its batch dims broadcast over the output's.
      int64_t sizes_a[Shape::kMaxRank], sizes_b[Shape::kMaxRank];
      int64_t strides_a[Shape::kMaxRank] = {}, strides_b[Shape::kMaxRank] = {};
      int64_t batches = 1;
      for (int d = 0; d < nbatch; ++d) {
        sizes_a[d] = sizes_b[d] = op.output_shape[d];
        batches *= op.output_shape[d];
        const int ea = d - (nbatch - (ra - 2)), eb = d - (nbatch - (rb - 2));
        strides_a[d] = (ea < 0 || a.shape[ea] == 1) ? 0 : a.strides[ea];
        strides_b[d] = (eb < 0 || b.shape[eb] == 1) ? 0 : b.strides[eb];
      }
      sizes_a[nbatch] = m;
      sizes_a[nbatch + 1] = k;
      strides_a[nbatch] = a.strides[ra - 2];
      strides_a[nbatch + 1] = a.strides[ra - 1];
      sizes_b[nbatch] = k;
      sizes_b[nbatch + 1] = n;
      strides_b[nbatch] = b.strides[rb - 2];
      strides_b[nbatch + 1] = b.strides[rb - 1];
      const int64_t total = batches * m * n;
      if (total == 0) return;
      const size_t size = dtype_size(a.dtype);
      // Each operand as dense rows: its own buffer where it is laid out so already (no view,
      // no broadcast batch), else a copy.
      const auto dense = [&](const StridedOperand& x, const int64_t* sizes, const int64_t* strides,
                             int64_t elements) {
        bool laid_out = x.offset == 0;
        int64_t expected = 1;
        for (int d = nbatch + 1; d >= 0 && laid_out; --d) {
          laid_out = sizes[d] == 1 || strides[d] == expected;
          expected *= sizes[d];
        }
        if (laid_out) return slots[x.slot];
        void* rows = scratch(static_cast<size_t>(elements) * size);
        copy(slots[x.slot], size, nbatch + 2, sizes, strides, x.offset, rows);
        return rows;
      };
      void* a_rows = dense(a, sizes_a, strides_a, batches * m * k);
      void* b_rows = dense(b, sizes_b, strides_b, batches * k * n);
      if (device.library_matmul(a_rows, b_rows, out, batches, m, n, k, a.dtype, op.output_dtype)) {
        return;
      }
      Arguments(device, launch.kernel)
          .buffer(a_rows)
          .buffer(b_rows)
          .buffer(out)
          .value<int64_t>(m)
          .value<int64_t>(n)
          .value<int64_t>(k);
      constexpr int64_t tile = Routines::kTile;
      const int64_t groups = batches * ((m + tile - 1) / tile) * ((n + tile - 1) / tile);
      device.launch(launch.kernel, static_cast<size_t>(groups * tile * tile), tile * tile);
      return;
    }
    case ir::OpKind::IndexSelect: {
      const StridedOperand &table = op.operands[0], &ids = op.operands[1];
      const int dim = static_cast<int>(op.attrs[0]);
      const IndexGeometry g = geometry(table.shape, dim);
      check_ids(index, launch.check, ids, g.rows, std::nullopt);
      const int64_t count = ids.shape.numel(), total = g.outer * count * g.inner;
      // An empty table has no row to read: any id fails its check, and nothing is gathered.
      if (total == 0 || g.rows == 0) return;
      Arguments(device, launch.kernel)
          .buffer(contiguous(table))
          .buffer(slots[ids.slot])
          .value<int64_t>(ids.offset)
          .value<int64_t>(ids.shape.rank() == 0 ? 0 : ids.strides[0])
          .buffer(out)
          .value<int64_t>(g.outer)
          .value<int64_t>(g.rows)
          .value<int64_t>(g.inner)
          .value<int64_t>(count);
      device.launch(launch.kernel, grid_for(total), kGroup);
      return;
    }
    case ir::OpKind::IndexAdd: {
      const StridedOperand &source = op.operands[0], &ids = op.operands[1];
      const IndexGeometry g = geometry(op.output_shape, static_cast<int>(op.attrs[0]));
      check_ids(index, launch.check, ids, g.rows, std::nullopt);
      const int64_t total = g.outer * g.rows * g.inner;
      if (total == 0) return;
      const bool wide = dtype_info(op.output_dtype).wide_register;
      void* acc = wide ? scratch(static_cast<size_t>(total) * sizeof(float)) : out;
      Arguments(device, launch.kernel)
          .buffer(contiguous(source))
          .buffer(slots[ids.slot])
          .value<int64_t>(ids.offset)
          .value<int64_t>(ids.shape.rank() == 0 ? 0 : ids.strides[0])
          .buffer(acc)
          .value<int64_t>(g.outer)
          .value<int64_t>(g.rows)
          .value<int64_t>(g.inner)
          .value<int64_t>(ids.shape.numel());
      device.launch(launch.kernel, grid_for(g.outer * g.inner), kGroup);
      if (!wide) return;
      Arguments(device, launch.convert)
          .buffer(acc)
          .value<int64_t>(0)
          .value<int64_t>(1)
          .buffer(out)
          .value<int64_t>(total);
      device.launch(launch.convert, grid_for(total), kGroup);
      return;
    }
    case ir::OpKind::CheckIndex: {
      const StridedOperand& ids = op.operands[0];
      check_ids(index, launch.check, ids, op.attrs[0], op.attrs[1]);
      const int64_t count = ids.shape.numel();
      if (count == 0) return;
      Arguments(device, launch.convert)
          .buffer(slots[ids.slot])
          .value<int64_t>(ids.offset)
          .value<int64_t>(ids.shape.rank() == 0 ? 0 : ids.strides[0])
          .buffer(out)
          .value<int64_t>(count);
      device.launch(launch.convert, grid_for(count), kGroup);
      return;
    }
    case ir::OpKind::Cat: {
      const int dim = static_cast<int>(op.attrs[0]);
      int64_t out_strides[Shape::kMaxRank];
      contiguous_strides(op.output_shape, out_strides);
      int64_t at = 0;
      for (const StridedOperand& part : op.operands) {
        copy(slots[part.slot], dtype_size(part.dtype), part.shape.rank(), part.shape.begin(),
             part.strides, part.offset, out, out_strides, at * out_strides[dim]);
        at += part.shape[dim];
      }
      return;
    }
    case ir::OpKind::ArgSort:
    case ir::OpKind::CumSum: {
      const Shape& shape = op.output_shape;
      const auto [rows, n] = rows_of(shape);
      if (rows == 0) return;
      Arguments(device, launch.kernel)
          .buffer(contiguous(op.operands[0]))
          .buffer(out)
          .value<int64_t>(rows)
          .value<int64_t>(n)
          .value<int32_t>(op.attrs[0] != 0 ? 1 : 0);
      device.launch(launch.kernel, grid_for(op.op == ir::OpKind::ArgSort ? rows * n : rows),
                    kGroup);
      return;
    }
    default:
      throw Error(device.kind() + ": no routine for op " + ir::op_info(op.op).name);
  }
}

size_t node_bytes(const ir::Graph& graph, uint32_t node) {
  const ir::Node& n = graph.node(node);
  return static_cast<size_t>(n.shape.numel()) * dtype_size(n.dtype);
}

}  // namespace

std::shared_ptr<OffloadCompiledGraph> compile_graph(const Runtime& device, const ir::Graph& graph,
                                                    const CompileOptions& options) {
  auto compiled = std::make_shared<OffloadCompiledGraph>();
  compiled->plan = compiler::plan_execution(graph, options.fusion);
  const compiler::ExecutionPlan& plan = compiled->plan;
  compiled->num_kernels = static_cast<int64_t>(plan.kernels.size());
  Routines routines(device.dialect());
  for (size_t size : {1, 2, 4, 8}) compiled->copy_names[size] = routines.copy(size);
  std::vector<const compiler::KernelProgram*> programs;
  std::vector<std::string> symbols;
  const size_t count = plan.launches.size();
  compiled->kernel_names.resize(count);
  compiled->fold_names.resize(count);
  compiled->check_names.resize(count);
  compiled->convert_names.resize(count);
  for (size_t l = 0; l < count; ++l) {
    const compiler::Kernel& first = plan.kernels[plan.launches[l].kernels.front()];
    if (first.opaque < 0) {
      const std::string symbol = "lt_k" + std::to_string(l);
      programs.push_back(&first.program);
      symbols.push_back(symbol);
      compiled->kernel_names[l] = symbol;
      if (first.program.reduce != ReduceKind::None) {
        compiled->fold_names[l] =
            routines.fold(first.program.instrs[first.program.outputs[0]].dtype,
                          graph.node(first.output_nodes[0]).dtype);
      }
      continue;
    }
    const ir::Node& node = graph.node(static_cast<uint32_t>(first.opaque));
    const auto operand = [&](size_t i) { return graph.node(first.input_nodes[i]).dtype; };
    std::string& kernel = compiled->kernel_names[l];
    switch (node.op) {
      case ir::OpKind::MatMul:
        kernel = routines.matmul(operand(0), node.dtype);
        break;
      case ir::OpKind::IndexSelect:
        kernel = routines.index_select(dtype_size(operand(0)), operand(1));
        compiled->check_names[l] = routines.check_ids(operand(1));
        break;
      case ir::OpKind::IndexAdd:
        if (!dtype_info(node.dtype).arithmetic) {
          throw Error(device.kind() + ": index_add has no kernel for dtype " +
                      dtype_name(node.dtype));
        }
        kernel = routines.index_add(node.dtype, operand(1));
        compiled->check_names[l] = routines.check_ids(operand(1));
        if (dtype_info(node.dtype).wide_register) {
          compiled->convert_names[l] = routines.convert(node.dtype, node.dtype, true);
        }
        break;
      case ir::OpKind::CheckIndex:
        compiled->check_names[l] = routines.check_ids(operand(0));
        compiled->convert_names[l] = routines.convert(operand(0), node.dtype);
        break;
      case ir::OpKind::Cat:
        break;
      case ir::OpKind::ArgSort:
        kernel = routines.argsort(operand(0));
        break;
      case ir::OpKind::CumSum:
        if (!dtype_info(node.dtype).floating && node.dtype != DType::i64) {
          throw Error(std::string("cumsum: no kernel for dtype ") + dtype_name(node.dtype));
        }
        kernel = routines.cumsum(node.dtype);
        break;
      default:
        throw Error(device.kind() + ": the device has no routine for " + ir::op_info(node.op).name +
                    " (collectives run on the cpu device)");
    }
  }
  compiled->program = device.build(programs, symbols, routines.source());
  const auto take = [&](const std::string& name) {
    if (!name.empty() && !compiled->kernels.count(name)) {
      compiled->kernels[name] = device.kernel(compiled->program, name);
    }
  };
  for (size_t l = 0; l < count; ++l) {
    take(compiled->kernel_names[l]);
    take(compiled->fold_names[l]);
    take(compiled->check_names[l]);
    take(compiled->convert_names[l]);
  }
  for (size_t size : {1, 2, 4, 8}) take(compiled->copy_names[size]);
  return compiled;
}

std::shared_ptr<Executable> OffloadCompiledGraph::bind(const ir::Graph& graph,
                                                       std::string* why) const {
  if (!plan.assumptions.hold_for(graph, why)) return nullptr;
  auto exe = std::make_shared<OffloadExecutable>();
  exe->compiled = shared_from_this();
  exe->num_kernels = num_kernels;
  exe->num_inputs = plan.num_inputs;
  exe->num_outputs = plan.num_outputs;
  exe->donation_candidates = plan.donation_candidates;
  exe->output_launch = plan.output_launch;
  for (uint32_t node : plan.temp_nodes) {
    exe->temp_bytes.push_back(node_bytes(graph, node));
    exe->temporary_bytes += static_cast<int64_t>(exe->temp_bytes.back());
  }
  const auto kernel = [&](const std::string& name) -> void* {
    return name.empty() ? nullptr : kernels.at(name).get();
  };
  for (size_t size : {1, 2, 4, 8}) exe->copy[size] = kernel(copy_names[size]);
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    Launch launch;
    const compiler::Kernel& first = plan.kernels[plan.launches[l].kernels.front()];
    launch.kernel = kernel(kernel_names[l]);
    launch.check = kernel(check_names[l]);
    launch.convert = kernel(convert_names[l]);
    if (first.opaque >= 0) {
      launch.opaque = std::make_shared<const OpaqueOp>(make_opaque_op(graph, plan, first));
      if (compiler::may_fail_at_run_time(launch.opaque->op)) {
        exe->last_checked_launch = static_cast<int64_t>(l);
      }
    } else {
      launch.program = &first.program;
      launch.reduce = first.program.reduce;
      launch.value_dtype = first.program.instrs[first.program.outputs[0]].dtype;
      launch.output_dtype = graph.node(first.output_nodes[0]).dtype;
      launch.fold = kernel(fold_names[l]);
      for (uint32_t k : plan.launches[l].kernels) {
        launch.instances.push_back(make_instance(graph, plan, plan.kernels[k], launch.reduce,
                                                 /*allow_columns=*/false));
      }
    }
    exe->launches.push_back(std::move(launch));
  }
  exe->num_launches = static_cast<int64_t>(exe->launches.size());
  return exe;
}

std::vector<std::shared_ptr<void>> run_executable(const Runtime& device,
                                                  const OffloadExecutable& exe,
                                                  const ExecutionArgs& args,
                                                  const std::function<BufferPtr(size_t)>& allocate,
                                                  size_t& launches_begun) {
  RunState run{device, exe, allocate, {}, {}, {}, {}, {}};
  // Declared after the run's state, so destroyed first: when the step fails, a launch that
  // failed to queue included, the device has finished with the host's scalar arrays before they
  // are released. (Device buffers need no wait: a runtime frees one after the work queued on it.)
  struct FinishOnFailure {
    const Runtime& device;
    const int exceptions = std::uncaught_exceptions();
    ~FinishOnFailure() {
      if (std::uncaught_exceptions() == exceptions) return;
      try {
        device.finish();
      } catch (const std::exception&) {
        // The device's own error is the step's: it was raised already or is raised next.
      }
    }
  } finish_on_failure{device};
  for (const BufferPtr& input : args.inputs) run.slots.push_back(input->data());
  for (const BufferPtr& output : args.outputs) run.slots.push_back(output->data());
  for (size_t bytes : exe.temp_bytes) {
    run.temporaries.push_back(allocate(bytes));
    run.slots.push_back(run.temporaries.back()->data());
  }
  for (size_t l = 0; l < exe.launches.size(); ++l) {
    launches_begun = l + 1;
    const Launch& launch = exe.launches[l];
    if (launch.opaque) {
      run.run_opaque(l, launch);
    } else {
      run.run_kernel(launch, args.scalars);
    }
    run.held.clear();
    if (static_cast<int64_t>(l) != exe.last_checked_launch) continue;
    // Nothing after the checks runs until they have passed: the launches after them write the
    // outputs that took over the inputs' buffers, which a failed step must leave as they were.
    device.finish();
    for (RunState::Check& check : run.checks) {
      device.read(check.status->data(), check.result, sizeof check.result);
      if (check.result[0] < 0) continue;
      const OpaqueOp& op = *exe.launches[check.launch].opaque;
      const bool targets = op.op == ir::OpKind::CheckIndex;
      const Shape& indexed =
          op.op == ir::OpKind::IndexSelect ? op.operands[0].shape : op.output_shape;
      const int dim = targets ? 0 : static_cast<int>(op.attrs[0]);
      const int64_t size = targets ? op.attrs[0] : indexed[dim];
      throw_index_out_of_range(index_op_name(op.op), dim, size, check.result[1], check.result[0],
                               targets ? std::optional<int64_t>(op.attrs[1]) : std::nullopt);
    }
  }
  return {run.host_scalars.begin(), run.host_scalars.end()};
}

}  // namespace lt::backend::offload
