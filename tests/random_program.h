#pragma once
// Random lazy-tensor programs for differential tests (fusion_test, fuzz_test). A program runs a
// few steps; each step applies random ops (broadcasting, mixed f32/f64/bf16/f16, in-place updates,
// aliased handles, shared subexpressions, reductions, reads before mark_step, views of every
// kind and views of views, gathers, comparisons feeding where and masked_fill, argmax, matrix
// products) to a pool of tensors, drops some of them (dead tensors), takes the reference value
// of every live one, calls mark_step and compares. Live tensors, views among them, carry over to
// the next step.
//
// Every value carries an interval and a forward error bound (interval arithmetic plus a
// rounding term per op), so each comparison's tolerance follows from the program itself. Ops
// whose operands leave the op's domain, or whose error bound would swamp the value, are never
// drawn: no NaN is produced and a tolerance never hides a wrong value. Ops whose result is
// discrete (comparisons, argmax) are drawn only where the reference's values keep every
// element farther from a decision than the engine's error can move it.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "random_program/bounds.h"
#include "random_program/op_cases.h"
#include "trace/tensor_state.h"  // TensorState::is_view

namespace lt_test {

using lt::DType;
using lt::Shape;
using lt::Tensor;

struct ProgramOptions {
  int steps = 3;
  int min_ops = 3;
  int max_ops = 12;
  bool reductions = true;  // argmax too, when selections
  bool mixed_dtypes = true;
  bool half_dtypes = true;     // bf16 and f16 tensors too, with mixed_dtypes
  bool views = true;           // reshape, view, transpose, permute, expand, slice, select, ...
  bool gathers = true;         // cat, index_select, embedding
  bool selections = true;      // comparisons feeding where and masked_fill, or kept as 0/1 values
  bool products = true;        // matmul, bmm, linear
  bool large_shapes = true;    // sometimes shapes spanning several tiles and work units
  double partial_sync = 0.05;  // chance, per op, of reading a pending tensor before mark_step
};

// What the programs of this process drew, by kind (the view, gather, selection and product ops,
// and the ways they combine), so that a test can check that each of drawn_kinds() occurred.
inline std::map<std::string, int64_t>& drawn_counts() {
  static std::map<std::string, int64_t> counts;
  return counts;
}
inline void note_drawn(const std::string& kind) {
  ++drawn_counts()[kind];
}
// The kinds that a long enough run with every option on draws.
inline const std::vector<std::string>& drawn_kinds() {
  static const std::vector<std::string> kinds = {"reshape",
                                                 "reshape of a non-contiguous tensor",
                                                 "view",
                                                 "view of a non-contiguous tensor",
                                                 "transpose",
                                                 "permute",
                                                 "t",
                                                 "unsqueeze",
                                                 "squeeze",
                                                 "squeeze(dim)",
                                                 "expand",
                                                 "expand adding dims",
                                                 "slice",
                                                 "slice with step > 1",
                                                 "slice with negative bounds",
                                                 "narrow",
                                                 "select",
                                                 "flatten",
                                                 "contiguous",
                                                 "view of a view",
                                                 "elementwise op on a view",
                                                 "in-place op on a view operand",
                                                 "reduction of a view",
                                                 "in-place op on a view (refused)",
                                                 "view read before mark_step",
                                                 "live view after mark_step",
                                                 "cat",
                                                 "cat of 3 tensors",
                                                 "cat of a view",
                                                 "index_select",
                                                 "index_select with repeated ids",
                                                 "index_select of a view",
                                                 "embedding",
                                                 "where",
                                                 "masked_fill",
                                                 "comparison with a scalar",
                                                 "comparison of two tensors",
                                                 "comparison of a view",
                                                 "comparison as a value",
                                                 "argmax",
                                                 "argmax along a dim",
                                                 "argmax of a view",
                                                 "matmul",
                                                 "matmul with a 1-D operand",
                                                 "matmul with batch broadcasting",
                                                 "matmul of a transposed view",
                                                 "matmul of a view",
                                                 "bmm",
                                                 "linear",
                                                 "linear with bias",
                                                 "linear of a view",
                                                 "bf16 op",
                                                 "f16 op",
                                                 "bf16 with f16 (an f32 op)",
                                                 "in-place op rounding to bf16 or f16",
                                                 "bf16 reduction",
                                                 "f16 reduction",
                                                 "bf16 product",
                                                 "f16 product (refused)",
                                                 "cast to bf16",
                                                 "cast to f16",
                                                 "cast between bf16 and f16"};
  return kinds;
}

inline std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    dims[i] = da == 1 ? db : da;
  }
  return Shape(dims);
}

// PyTorch's type promotion as the engine documents it: operands with dimensions decide the
// dtype; rank-0 tensors decide only when every operand is rank 0.
inline DType op_dtype(const std::vector<Tensor>& operands) {
  std::optional<DType> dims, zero_dim;
  for (const Tensor& t : operands) {
    std::optional<DType>& d = t.dim() > 0 ? dims : zero_dim;
    d = d ? lt::promote_types(*d, t.dtype()) : t.dtype();
  }
  return dims ? *dims : *zero_dim;
}

// Turns a hang into a failure. A kernel that never finishes blocks the device stream, and with
// it every later test, so on timeout this prints what was running and ends the process.
class Watchdog {
 public:
  Watchdog(double seconds, std::function<std::string()> what)
      : thread_([this, seconds, what = std::move(what)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; })) {
            return;
          }
          std::fprintf(stderr, "FAILED: no progress for %.0f s (a hang): %s\n", seconds,
                       what().c_str());
          std::_Exit(1);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest is initialized
};

class RandomProgram {
 public:
  // `label` names the program (its seed) in the message of a hang.
  RandomProgram(uint64_t seed, ProgramOptions options, std::string label)
      : options_(options), rng_(seed), label_(std::move(label)) {}

  // Runs every step and reports mismatches through gtest, followed by the program's trace.
  void run() {
    const Watchdog watchdog(kHangSeconds, [this] { return label_ + "\n" + trace_.str(); });
    base_ = draw_base();
    log("base shape " + base_.str());
    try {
      for (int step = 1; step <= options_.steps && !failed_; ++step) run_step(step);
    } catch (const std::exception& e) {  // an op refused valid operands, say
      fail(std::string("unexpected exception: ") + e.what());
    }
    if (failed_) ADD_FAILURE() << "the program so far:\n" << trace_.str();
  }

 private:
  struct Slot {
    Tensor t;
    std::shared_ptr<Bound> bound;  // shared by aliased handles, as their values are
    std::string name;
    bool view = false;       // made by a view op: in-place ops on it are refused
    bool contiguous = true;  // known to be laid out in order (a view of it needs no copy)
  };

  void run_step(int step) {
    log("-- step " + std::to_string(step));
    const int ops = options_.min_ops + below(options_.max_ops - options_.min_ops + 1);
    for (int i = 0; i < ops && !failed_; ++i) random_action();
    if (failed_) return;

    // Drop some tensors before the step: they are dead and must not be computed.
    std::vector<Slot> kept;
    for (Slot& slot : pool_) {
      if (chance(0.6) && kept.size() < 8) kept.push_back(std::move(slot));
    }
    if (kept.empty()) kept.push_back(std::move(pool_.back()));
    pool_ = std::move(kept);
    std::string names;
    for (const Slot& slot : pool_) names += " " + slot.name;
    log("live:" + names);

    std::vector<std::vector<double>> want;
    std::set<const void*> pending;
    for (const Slot& slot : pool_) {
      want.push_back(lt::reference::evaluate(slot.t));
      if (slot.t.is_pending()) pending.insert(slot.t.impl().get());
    }
    const int64_t steps_before = lt::last_step_stats().step;
    lt::mark_step();
    // Dead tensors are no outputs, and tensors that share a value share one. (A step may launch
    // nothing when every pending tensor just names existing data, as after copy_.)
    if (lt::last_step_stats().step != steps_before) {
      EXPECT_LE(lt::last_step_stats().outputs, static_cast<int64_t>(pending.size()));
    }
    for (size_t i = 0; i < pool_.size() && !failed_; ++i) {
      EXPECT_FALSE(pool_[i].t.is_pending()) << pool_[i].name;
      check(pool_[i], want[i], "after mark_step " + std::to_string(step));
      if (pool_[i].view) note_drawn("live view after mark_step");
    }
  }

  void random_action() {
    for (int attempt = 0; attempt < 20; ++attempt) {
      const int choice = below(100);
      if (pool_.empty() || choice < 8) {
        add(new_leaf(sub_shape(base_)));
        return;
      }
      if (choice < 11) {
        alias();
        return;
      }
      const int sync = 11 + static_cast<int>(options_.partial_sync * 100);
      if (choice < sync) {
        if (partial_sync()) return;
        continue;
      }
      if (choice < sync + 22) {
        if (in_place()) return;
        continue;
      }
      if (choice < sync + 30 && options_.reductions) {
        if (options_.selections && chance(0.2) ? argmax() : reduction()) return;
        continue;
      }
      if (choice < sync + 34 && options_.mixed_dtypes) {
        if (cast()) return;
        continue;
      }
      if (choice < sync + 46 && options_.views) {
        if (view_op()) return;
        continue;
      }
      if (choice < sync + 52 && options_.gathers) {
        const int which = below(3);
        if (which == 0 ? concatenate() : which == 1 ? index_select() : embedding()) return;
        continue;
      }
      if (choice < sync + 58 && options_.selections) {
        if (selection()) return;
        continue;
      }
      if (choice < sync + 64 && options_.products) {
        const int which = below(4);
        if (which < 2 ? matmul() : which == 2 ? bmm() : linear()) return;
        continue;
      }
      if (out_of_place()) return;
    }
    add(new_leaf(sub_shape(base_)));
  }

  // --- Actions. ---

  bool out_of_place() {
    const OpCase& op = op_cases()[below(static_cast<int>(op_cases().size()))];
    if (op.forms.empty()) return false;
    std::vector<size_t> in = {static_cast<size_t>(below(static_cast<int>(pool_.size())))};
    Shape shape = pool_[in[0]].t.shape();
    for (int k = 1; k < op.arity; ++k) {
      in.push_back(operand(shape, /*into=*/false));
      shape = *broadcast(shape, pool_[in.back()].t.shape());
    }
    std::vector<Tensor> ts;
    for (size_t i : in) ts.push_back(pool_[i].t);
    const DType dtype = op_dtype(ts);
    const std::vector<double> s = scalars(op.draw);
    const std::optional<std::vector<Bound>> bs = converted(in, dtype);
    if (!bs || !op.ok(bs->data(), s.data())) return false;
    const Bound result = op.bound(bs->data(), s.data(), unit(dtype));
    if (!acceptable(result, dtype, in)) return false;
    note_dtypes(dtype, ts);
    const Form& form = op.forms[below(static_cast<int>(op.forms.size()))];
    Tensor t = form.fn(ts.data(), s.data());
    const std::string name = fresh_name();
    log(name + " = " + describe(form.text, in, s) + " -> " + lt::dtype_name(t.dtype()) + " " +
        t.shape().str());
    EXPECT_EQ(t.shape().str(), shape.str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype)) << name;
    if (any_view(in)) note_drawn("elementwise op on a view");
    add({t, std::make_shared<Bound>(result), name});
    return true;
  }

  bool in_place() {
    const OpCase& op = op_cases()[below(static_cast<int>(op_cases().size()))];
    if (op.in_place.empty()) return false;
    const size_t target = below(static_cast<int>(pool_.size()));
    // Most in-place ops on views are redrawn; some check that the engine refuses them.
    if (pool_[target].view && chance(0.7)) return false;
    const Shape shape = pool_[target].t.shape();
    std::vector<size_t> in = {target};
    for (int k = 1; k < op.arity; ++k) in.push_back(operand(shape, /*into=*/true));
    std::vector<Tensor> ts;
    for (size_t i : in) ts.push_back(pool_[i].t);
    const DType self = pool_[target].t.dtype();
    const DType dtype = op.self_dtype ? self : op_dtype(ts);
    const std::vector<double> s = scalars(op.draw);
    const std::optional<std::vector<Bound>> bs = converted(in, dtype);
    if (!bs || !op.ok(bs->data(), s.data())) return false;
    Bound result = op.bound(bs->data(), s.data(), unit(dtype));
    // The result is cast to the target's dtype.
    if (!holds(self, dtype)) result = bounds::round(result, unit(self));
    if (!acceptable(result, self, in)) return false;
    const InPlaceForm& form = op.in_place[below(static_cast<int>(op.in_place.size()))];
    if (pool_[target].view) {
      // Refused with lt::Error, and nothing changes (the bound stays).
      log(pool_[target].name + ": " + describe(form.text, in, s) + " (a view: refused)");
      bool refused = false;
      try {
        form.fn(pool_[target].t, ts.data(), s.data());
      } catch (const lt::Error&) {
        refused = true;
      }
      if (!refused) fail(pool_[target].name + ": an in-place op on a view was not refused");
      note_drawn("in-place op on a view (refused)");
      return true;
    }
    log(pool_[target].name + ": " + describe(form.text, in, s));
    if (any_view(std::vector<size_t>(in.begin() + 1, in.end())))
      note_drawn("in-place op on a view operand");
    note_dtypes(dtype, ts);
    if (register_dtype(self) != self && dtype != self) {
      note_drawn("in-place op rounding to bf16 or f16");
    }
    form.fn(pool_[target].t, ts.data(), s.data());
    EXPECT_EQ(pool_[target].t.shape().str(), shape.str()) << pool_[target].name;
    EXPECT_STREQ(lt::dtype_name(pool_[target].t.dtype()), lt::dtype_name(self))
        << pool_[target].name;
    *pool_[target].bound = result;
    return true;
  }

  bool reduction() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const Tensor a = pool_[i].t;
    const Bound x = *pool_[i].bound;
    const int rank = a.dim();
    const bool all = rank == 0 || chance(0.3);
    std::vector<int> dims;
    bool keepdim = false;
    int64_t count = a.numel();
    if (!all) {
      count = 1;
      for (int d = 0; d < rank; ++d) {
        if (!chance(0.5)) continue;
        dims.push_back(chance(0.3) ? d - rank : d);
        count *= a.shape()[d];
      }
      std::shuffle(dims.begin(), dims.end(), rng_);
      keepdim = chance(0.5);
      if (dims.empty()) count = a.numel();  // as torch: no dims reduces them all
    }
    enum Kind { kSum, kMean, kMax, kNorm };
    Kind kind = static_cast<Kind>(below(4));
    // A max over nothing throws and a mean over nothing is NaN: sum instead.
    if (count == 0 && (kind == kMean || kind == kMax)) kind = kSum;
    const Unit u = unit(a.dtype());
    const double n = static_cast<double>(count);
    // Each output folds n values in double, then rounds to the dtype.
    const double fold = n * 0x1p-53 * n * x.mag();
    Bound r;
    switch (kind) {
      case kSum:
        r = bounds::round({n * x.lo, n * x.hi, n * x.err + fold}, u);
        break;
      case kMean:
        r = bounds::round({x.lo, x.hi, x.err + fold / n}, u);
        break;
      case kMax:
        r = x;
        break;
      case kNorm:
        r = bounds::round({std::sqrt(n) * std::max({x.lo, -x.hi, 0.0}), std::sqrt(n) * x.mag(),
                           std::sqrt(n) * x.err + fold},
                          u);
        break;
    }
    if (!acceptable(r, a.dtype(), {i})) return false;
    static constexpr const char* kNames[] = {"sum", "mean", "max", "norm"};
    using Reduce = Tensor (Tensor::*)() const;
    using ReduceDims = Tensor (Tensor::*)(const std::vector<int>&, bool) const;
    static constexpr Reduce kAll[] = {&Tensor::sum, &Tensor::mean, &Tensor::max, &Tensor::norm};
    static constexpr ReduceDims kDims[] = {&Tensor::sum, &Tensor::mean, &Tensor::max,
                                           &Tensor::norm};
    const Tensor t = all ? (a.*kAll[kind])() : (a.*kDims[kind])(dims, keepdim);
    std::string args;
    for (int d : dims) args += (args.empty() ? "" : ", ") + std::to_string(d);
    const std::string text =
        std::string("a.") + kNames[kind] +
        (all ? "()" : "({" + args + "}, " + (keepdim ? "true" : "false") + ")");
    const std::string name = fresh_name();
    log(name + " = " + describe(text.c_str(), {i}, {}) + " -> " + t.shape().str());
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    if (pool_[i].view) note_drawn("reduction of a view");
    if (a.dtype() == DType::bf16) note_drawn("bf16 reduction");
    if (a.dtype() == DType::f16) note_drawn("f16 reduction");
    add({t, std::make_shared<Bound>(r), name});
    return true;
  }

  // A cast to another float dtype: the other of f32 and f64 mostly, now and then bf16 or f16.
  bool cast() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const DType from = pool_[i].t.dtype();
    DType to = from == DType::f32 ? DType::f64 : DType::f32;
    if (options_.half_dtypes && chance(0.25)) {
      to = chance(0.5) ? DType::bf16 : DType::f16;
      if (to == from) to = from == DType::bf16 ? DType::f16 : DType::bf16;
    } else if (register_dtype(from) != from && chance(0.3)) {
      to = DType::f64;
    }
    if (pool_[i].bound->mag() > max_magnitude(to)) return false;
    add_cast(i, to);
    return true;
  }

  // Adds pool_[i] converted to `to` (within its range); returns its index (i itself when it has
  // that dtype).
  size_t add_cast(size_t i, DType to) {
    const DType from = pool_[i].t.dtype();
    if (from == to) return i;
    Bound r = *pool_[i].bound;
    if (!holds(to, from)) r = bounds::round(r, unit(to));
    Tensor t = pool_[i].t.to(to);
    const std::string name = fresh_name();
    log(name + " = " +
        describe(("a.to(" + std::string(lt::dtype_name(to)) + ")").c_str(), {i}, {}));
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(to)) << name;
    if (to == DType::bf16) note_drawn("cast to bf16");
    if (to == DType::f16) note_drawn("cast to f16");
    if (register_dtype(from) != from && register_dtype(to) != to) {
      note_drawn("cast between bf16 and f16");
    }
    add({t, std::make_shared<Bound>(r), name});
    return pool_.size() - 1;
  }

  // A second handle to the same tensor, as `q = p` in Python.
  void alias() {
    Slot copy = pool_[below(static_cast<int>(pool_.size()))];
    const std::string of = copy.name;
    copy.name = fresh_name();
    log(copy.name + " = " + of + " (the same handle)");
    add(std::move(copy));
  }

  // Reads a pending tensor before mark_step: a partial sync, which must donate nothing.
  bool partial_sync() {
    std::vector<size_t> candidates;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i].t.is_pending()) candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    const Slot& slot = pool_[candidates[below(static_cast<int>(candidates.size()))]];
    log("read " + slot.name);
    if (slot.view) note_drawn("view read before mark_step");
    const std::vector<double> want = lt::reference::evaluate(slot.t);
    const int64_t steps_before = lt::last_step_stats().step;
    check(slot, want, "read before mark_step");
    if (lt::last_step_stats().step != steps_before) {
      EXPECT_EQ(lt::last_step_stats().donated_buffers, 0) << "a read donated a buffer";
    }
    return true;
  }

  // --- Views. ---

  // A view of a pool tensor (of every kind, with negative dims and Python slice bounds): its
  // values rearranged, under its bound.
  // A view op (or contiguous()) on a tensor of the pool, its layout checked against the op's
  // meaning, added to the pool.
  bool view_op() {
    // Views of tensors laid out out of order are rarer: favor them (reshapes that copy).
    const std::vector<size_t> disordered = slots_where([](const Slot& x) { return !x.contiguous; });
    const size_t i = !disordered.empty() && chance(0.4) ? disordered[below_size(disordered)]
                                                        : below(static_cast<int>(pool_.size()));
    const Slot& src = pool_[i];
    const ViewSource on{i, src, src.t, src.t.shape().to_vector(), src.t.dim()};
    DrawnView v;
    v.contiguous = src.contiguous;
    bool drawn = false;
    switch (below(14)) {
      case 0:
      case 1:
        drawn = draw_reshape(on, v);
        break;
      case 2:
        drawn = draw_view(on, v);
        break;
      case 3:
        drawn = draw_transpose(on, v);
        break;
      case 4:
        drawn = draw_permute(on, v);
        break;
      case 5:
        drawn = draw_t(on, v);
        break;
      case 6:
        drawn = draw_unsqueeze(on, v);
        break;
      case 7:
        drawn = draw_squeeze(on, v);
        break;
      case 8:
        drawn = draw_expand(on, v);
        break;
      case 9:
        drawn = draw_slice(on, v);
        break;
      case 10:
        drawn = draw_narrow(on, v);
        break;
      case 11:
        drawn = draw_select(on, v);
        break;
      case 12:
        drawn = draw_flatten(on, v);
        break;
      default:
        drawn = draw_contiguous(on, v);
        break;
    }
    if (!drawn) return false;
    if (v.refused || !layout_matches(on, v)) return true;
    add_view(i, v.t, v.text, v.want, v.contiguous || count(v.want) <= 1, v.is_view, v.kinds);
    return true;
  }

  // The tensor of the pool a view is drawn on: its index, slot, tensor, sizes and rank.
  struct ViewSource {
    size_t i;
    const Slot& src;
    const Tensor& a;
    std::vector<int64_t> s;
    int r;
  };

  // A view drawn on pool_[i]: the view, the shape it must have, whether it is known to be
  // contiguous, how it was written and the kinds it counts as, and `source`: the position in
  // pool_[i] of the view's element at an index (unset where the view keeps the source's order).
  struct DrawnView {
    Tensor t;
    std::vector<int64_t> want;
    bool contiguous = false;
    bool is_view = true;
    bool refused = false;  // the engine refused a view it must take (reported as a failure)
    std::string text;
    std::vector<std::string> kinds;
    std::function<std::vector<int64_t>(std::vector<int64_t>)> source;

    void permuting(const std::vector<int>& order) {
      source = [order](const std::vector<int64_t>& index) {
        std::vector<int64_t> at(index.size());
        for (size_t k = 0; k < order.size(); ++k) at[order[k]] = index[k];
        return at;
      };
    }
  };

  // Reshape, contiguous or not (a copy then).
  bool draw_reshape(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    std::vector<int64_t> sizes = factor(a.numel());
    v.want = sizes;
    if (a.numel() > 0 && !sizes.empty() && chance(0.3)) sizes[below_size(sizes)] = -1;
    v.text = "a.reshape(" + list(sizes) + ")";
    v.t = a.reshape(sizes);
    v.kinds.push_back(src.contiguous ? "reshape" : "reshape of a non-contiguous tensor");
    return true;  // a reshape of a tensor out of order may or may not copy: unknown
  }

  // View: any shape of a contiguous tensor, else a dim split or a 1 added/removed.
  bool draw_view(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    std::vector<int64_t> sizes = src.contiguous ? factor(a.numel()) : s;
    if (!src.contiguous) {
      std::vector<int> ones, splittable;
      for (int d = 0; d < r; ++d) (s[d] == 1 ? ones : splittable).push_back(d);
      const int how = below(3);
      if (how == 0 && !ones.empty()) {
        sizes.erase(sizes.begin() + ones[below_size(ones)]);
      } else if (how == 1 && !splittable.empty() && r < 6) {
        const int d = splittable[below_size(splittable)];
        std::vector<int64_t> divisors;
        for (int64_t p = 1; p <= s[d]; ++p) {
          if (s[d] % p == 0) divisors.push_back(p);
        }
        const int64_t p = divisors[below_size(divisors)];
        sizes[d] = s[d] / p;
        sizes.insert(sizes.begin() + d, p);
      } else if (r < 6) {
        sizes.insert(sizes.begin() + below(r + 1), 1);
      }
    }
    v.want = sizes;
    if (a.numel() > 0 && !sizes.empty() && chance(0.2)) sizes[below_size(sizes)] = -1;
    v.text = "a.view(" + list(sizes) + ")";
    try {
      v.t = a.view(sizes);
    } catch (const lt::Error& e) {
      log("(" + describe(v.text.c_str(), {i}, {}) + " threw: " + e.what() + ")");
      fail(v.text + " of " + src.name + " " + a.shape().str() + " was refused: " + e.what());
      v.refused = true;
      return true;
    }
    v.kinds.push_back(src.contiguous ? "view" : "view of a non-contiguous tensor");
    return true;  // splits and added 1s keep the layout's order, or its disorder
  }

  // Transpose.
  bool draw_transpose(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    const int bound = std::max(r, 1);
    const int d0 = below(2 * bound) - bound, d1 = below(2 * bound) - bound;
    std::vector<int> order(r);
    std::iota(order.begin(), order.end(), 0);
    if (r > 0) std::swap(order[(d0 + r) % r], order[(d1 + r) % r]);
    v.want = permuted(s, order);
    v.permuting(order);
    v.contiguous = v.contiguous && keeps_order(s, order);
    v.text = "a.transpose(" + std::to_string(d0) + ", " + std::to_string(d1) + ")";
    v.t = a.transpose(d0, d1);
    v.kinds.push_back("transpose");
    return true;
  }

  // Permute.
  bool draw_permute(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    std::vector<int> order(r);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    std::vector<int> dims = order;
    for (int& d : dims) d -= chance(0.3) ? r : 0;
    v.want = permuted(s, order);
    v.permuting(order);
    v.contiguous = v.contiguous && keeps_order(s, order);
    v.text = "a.permute(" + list(dims) + ")";
    v.t = a.permute(dims);
    v.kinds.push_back("permute");
    return true;
  }

  // T.
  bool draw_t(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (r > 2) return false;
    std::vector<int> order(r);
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    v.want = permuted(s, order);
    v.permuting(order);
    v.contiguous = v.contiguous && keeps_order(s, order);
    v.text = "a.t()";
    v.t = a.t();
    v.kinds.push_back("t");
    return true;
  }

  // Unsqueeze.
  bool draw_unsqueeze(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (r >= 6) return false;
    const int d = below(2 * (r + 1)) - (r + 1);
    v.want = s;
    v.want.insert(v.want.begin() + (d < 0 ? d + r + 1 : d), 1);
    v.text = "a.unsqueeze(" + std::to_string(d) + ")";
    v.t = a.unsqueeze(d);
    v.kinds.push_back("unsqueeze");
    return true;
  }

  // Squeeze.
  bool draw_squeeze(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    v.want = s;
    if (chance(0.5)) {
      v.want.erase(std::remove(v.want.begin(), v.want.end(), 1), v.want.end());
      v.text = "a.squeeze()";
      v.t = a.squeeze();
      v.kinds.push_back("squeeze");
    } else {
      const int bound = std::max(r, 1);
      const int d = below(2 * bound) - bound;
      if (r > 0 && s[(d + r) % r] == 1) v.want.erase(v.want.begin() + (d + r) % r);
      v.text = "a.squeeze(" + std::to_string(d) + ")";
      v.t = a.squeeze(d);
      v.kinds.push_back("squeeze(dim)");
    }
    return true;
  }

  // Expand: size-1 dims grow (or shrink to 0), new leading dims.
  bool draw_expand(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    const int lead = r < 5 && chance(0.4) ? 1 + below(2) : 0;
    std::vector<int64_t> sizes;
    for (int d = 0; d < lead; ++d) sizes.push_back(1 + below(3));
    v.want = sizes;
    for (int d = 0; d < r; ++d) {
      int64_t size = s[d];
      if (s[d] == 1) size = chance(0.05) ? 0 : 1 + below(3);
      v.want.push_back(size);
      sizes.push_back(size == s[d] && chance(0.5) ? -1 : size);
    }
    if (count(v.want) > 100000) return false;
    v.contiguous = v.contiguous && count(v.want) == a.numel();
    v.text = "a.expand(" + list(sizes) + ")";
    v.t = a.expand(sizes);
    v.source = [lead, s](std::vector<int64_t> index) {
      index.erase(index.begin(), index.begin() + lead);
      for (size_t d = 0; d < s.size(); ++d) index[d] = s[d] == 1 ? 0 : index[d];
      return index;
    };
    v.kinds.push_back("expand");
    if (lead > 0) v.kinds.push_back("expand adding dims");
    return true;
  }

  // Slice, with steps and Python bounds (negative, out of range).
  bool draw_slice(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (r == 0) return false;
    const int d = below(r);
    const int64_t n = s[d];
    const int64_t step = chance(0.4) ? 2 + below(2) : 1;
    auto draw = [&] {
      if (chance(0.05)) return int64_t{1} << 40;
      return chance(0.35) ? -1 - static_cast<int64_t>(below(static_cast<int>(n) + 2))
                          : static_cast<int64_t>(below(static_cast<int>(n) + 3));
    };
    const int64_t start = draw(), end = draw();
    // Python's slice bounds: negative ones count from the end, then both clamp to [0, n].
    auto clamp = [n](int64_t b) { return std::clamp<int64_t>(b < 0 ? b + n : b, 0, n); };
    const int64_t from = clamp(start), to = std::max(from, clamp(end));
    const int64_t length = (to - from + step - 1) / step;
    v.want = s;
    v.want[d] = length;
    v.contiguous = v.contiguous && slice_in_order(s, d, length, step);
    const int dim = chance(0.3) ? d - r : d;
    v.text = "a.slice(" + std::to_string(dim) + ", " + std::to_string(start) + ", " +
             std::to_string(end) + ", " + std::to_string(step) + ")";
    v.t = a.slice(dim, start, end, step);
    v.source = [d, from, step](std::vector<int64_t> index) {
      index[d] = from + index[d] * step;
      return index;
    };
    v.kinds.push_back("slice");
    if (step > 1) v.kinds.push_back("slice with step > 1");
    if (start < 0 || end < 0) v.kinds.push_back("slice with negative bounds");
    return true;
  }

  // Narrow.
  bool draw_narrow(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (r == 0) return false;
    const int d = below(r);
    const int64_t n = s[d];
    const int64_t from = below(static_cast<int>(n) + 1);
    const int64_t length = below(static_cast<int>(n - from) + 1);
    const int64_t start = from < n && chance(0.3) ? from - n : from;
    v.want = s;
    v.want[d] = length;
    v.contiguous = v.contiguous && slice_in_order(s, d, length, 1);
    const int dim = chance(0.3) ? d - r : d;
    v.text = "a.narrow(" + std::to_string(dim) + ", " + std::to_string(start) + ", " +
             std::to_string(length) + ")";
    v.t = a.narrow(dim, start, length);
    v.source = [d, from](std::vector<int64_t> index) {
      index[d] += from;
      return index;
    };
    v.kinds.push_back("narrow");
    return true;
  }

  // Select.
  bool draw_select(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    std::vector<int> dims;
    for (int d = 0; d < r; ++d) {
      if (s[d] > 0) dims.push_back(d);
    }
    if (dims.empty()) return false;
    const int d = dims[below_size(dims)];
    const int64_t n = s[d];
    const int64_t index = below(static_cast<int>(n)) - (chance(0.3) ? n : 0);
    v.want = s;
    v.want.erase(v.want.begin() + d);
    v.contiguous = v.contiguous && slice_in_order(s, d, 1, 1);
    const int dim = chance(0.3) ? d - r : d;
    v.text = "a.select(" + std::to_string(dim) + ", " + std::to_string(index) + ")";
    v.t = a.select(dim, index);
    v.source = [d, row = index < 0 ? index + n : index](std::vector<int64_t> at) {
      at.insert(at.begin() + d, row);
      return at;
    };
    v.kinds.push_back("select");
    return true;
  }

  // Flatten.
  bool draw_flatten(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (r == 0) {
      v.want = {1};
      v.text = "a.flatten()";
      v.t = a.flatten();
    } else {
      const int first = below(r), last = first + below(r - first);
      v.want.assign(s.begin(), s.begin() + first);
      v.want.push_back(count(std::vector<int64_t>(s.begin() + first, s.begin() + last + 1)));
      v.want.insert(v.want.end(), s.begin() + last + 1, s.end());
      const int start = first - (chance(0.3) ? r : 0), end = last - (chance(0.5) ? r : 0);
      v.text = "a.flatten(" + std::to_string(start) + ", " + std::to_string(end) + ")";
      v.t = a.flatten(start, end);
    }
    v.kinds.push_back("flatten");
    return true;  // merging dims of a tensor out of order may copy: unknown
  }

  // Contiguous: a copy of a view, the tensor itself otherwise.
  bool draw_contiguous(const ViewSource& on, DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    v.want = s;
    v.contiguous = true;
    v.is_view = false;
    v.text = "a.contiguous()";
    v.t = a.contiguous();
    v.kinds.push_back("contiguous");
    return true;
  }

  // The reference reads the view's layout (offset, strides) as the engine does: checks that
  // layout against the op's meaning, from the source's reference values (false: a failure,
  // reported).
  bool layout_matches(const ViewSource& on, const DrawnView& v) {
    const auto& [i, src, a, s, r] = on;
    if (v.t.shape() != Shape(v.want)) return true;  // add_view reports the wrong shape
    const std::vector<double> from = lt::reference::evaluate(a);
    std::vector<double> expected = from;
    if (v.source) {
      expected.clear();
      std::vector<int64_t> index(v.want.size());
      for (int64_t e = 0; e < count(v.want); ++e) {
        for (int64_t d = static_cast<int64_t>(v.want.size()) - 1, rest = e; d >= 0; --d) {
          index[d] = rest % v.want[d];
          rest /= v.want[d];
        }
        const std::vector<int64_t> at = v.source(index);
        int64_t position = 0;
        for (size_t d = 0; d < s.size(); ++d) position = position * s[d] + at[d];
        expected.push_back(from[position]);
      }
    }
    const std::vector<double> got = lt::reference::evaluate(v.t);
    for (size_t e = 0; e < std::max(got.size(), expected.size()); ++e) {
      if (e >= got.size() || e >= expected.size() || !(got[e] == expected[e])) {
        log("(" + describe(v.text.c_str(), {i}, {}) + ")");
        fail(v.text + " of " + src.name + " " + a.shape().str() + ": the reference's element " +
             std::to_string(e) + " is not the op's (" + std::to_string(got.size()) + " and " +
             std::to_string(expected.size()) + " elements)");
        return false;
      }
    }
    return true;
  }

  // Adds `t`, a view of pool_[i] (or its contiguous copy), checking its shape; returns its index.
  size_t add_view(size_t i, const Tensor& t, const std::string& text,
                  const std::vector<int64_t>& want, bool contiguous, bool is_view,
                  const std::vector<std::string>& kinds) {
    const Slot src = pool_[i];
    const std::string name = fresh_name();
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name << " = " << text << " of " << src.name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(src.t.dtype())) << name;
    for (const std::string& kind : kinds) note_drawn(kind);
    if (src.view) note_drawn("view of a view");
    if (t.impl() == src.t.impl()) {
      // The same handle (t() of a vector, contiguous() of a non-view, ...): an alias.
      log(name + " = " + describe(text.c_str(), {i}, {}) + " (the same handle)");
      Slot copy = src;
      copy.name = name;
      add(std::move(copy));
    } else {
      log(name + " = " + describe(text.c_str(), {i}, {}) + " -> " + t.shape().str());
      add({t, std::make_shared<Bound>(*src.bound), name, is_view, contiguous});
    }
    return pool_.size() - 1;
  }

  // Adds pool_[i] (rank >= 2) with its last two dims swapped, as a matmul operand; its index.
  size_t add_transposed(size_t i) {
    const Tensor a = pool_[i].t;
    const std::vector<int64_t> s = a.shape().to_vector();
    const int r = a.dim();
    std::vector<int> order(r);
    std::iota(order.begin(), order.end(), 0);
    std::swap(order[r - 2], order[r - 1]);
    const std::vector<int64_t> want = permuted(s, order);
    const bool contiguous = count(want) <= 1 || (pool_[i].contiguous && keeps_order(s, order));
    switch (r == 2 ? below(3) : 1 + below(2)) {
      case 0:
        return add_view(i, a.t(), "a.t()", want, contiguous, true, {"t"});
      case 1:
        return add_view(i, a.transpose(-1, -2), "a.transpose(-1, -2)", want, contiguous, true,
                        {"transpose"});
      default:
        return add_view(i, a.permute(order), "a.permute(" + list(order) + ")", want, contiguous,
                        true, {"permute"});
    }
  }

  // --- Gathers. ---

  // lt::cat of 2 or 3 tensors equal but along dim (the first one again, others from the pool,
  // new leaves).
  bool concatenate() {
    const std::vector<size_t> ranked = slots_where([](const Slot& x) { return x.t.dim() > 0; });
    if (ranked.empty()) return false;
    std::vector<size_t> in = {ranked[below_size(ranked)]};
    const Shape shape = pool_[in[0]].t.shape();
    const int r = shape.rank(), d = below(r);
    const size_t parts = chance(0.6) ? 2 : 3;
    while (in.size() < parts) {
      const std::vector<size_t> fits = slots_where([&](const Slot& x) {
        const Shape& other = x.t.shape();
        if (other.rank() != r) return false;
        for (int e = 0; e < r; ++e) {
          if (e != d && other[e] != shape[e]) return false;
        }
        return true;
      });
      if (chance(0.3)) {
        Shape part = shape;
        part[d] = below(4);
        add(new_leaf(part));
        in.push_back(pool_.size() - 1);
      } else {
        in.push_back(fits[below_size(fits)]);  // never empty: the first tensor fits
      }
    }
    std::vector<Tensor> ts;
    DType dtype = pool_[in[0]].t.dtype();
    std::vector<int64_t> want = shape.to_vector();
    want[d] = 0;
    for (size_t i : in) {
      ts.push_back(pool_[i].t);
      dtype = lt::promote_types(dtype, pool_[i].t.dtype());
      want[d] += pool_[i].t.shape()[d];
    }
    if (count(want) > kMaxNumel) return false;
    const std::optional<std::vector<Bound>> bs = converted(in, dtype);
    if (!bs) return false;
    Bound result = (*bs)[0];
    for (const Bound& b : *bs) result = bounds::hull(result, b);
    const int dim = chance(0.3) ? d - r : d;
    const Tensor t = lt::cat(ts, dim);
    const std::string name = fresh_name();
    const std::string text = std::string("lt::cat({a, b") + (parts == 3 ? ", c" : "") + "}, " +
                             std::to_string(dim) + ")";
    log(name + " = " + describe(text.c_str(), in, {}) + " -> " + lt::dtype_name(t.dtype()) + " " +
        t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype)) << name;
    note_drawn("cat");
    if (parts == 3) note_drawn("cat of 3 tensors");
    if (any_view(in)) note_drawn("cat of a view");
    add({t, std::make_shared<Bound>(result), name});
    return true;
  }

  // index_select along a random dim with in-range ids (some repeated; i64 or i32; 1-D or a
  // single rank-0 id).
  bool index_select() {
    const std::vector<size_t> ranked = slots_where([](const Slot& x) { return x.t.dim() > 0; });
    if (ranked.empty()) return false;
    const size_t i = ranked[below_size(ranked)];
    const Tensor a = pool_[i].t;
    const int r = a.dim(), d = below(r);
    const int n = static_cast<int>(a.shape()[d]);
    const bool single = n > 0 && chance(0.1);
    std::vector<int64_t> ids(single ? 1 : n == 0 ? 0 : below(6));
    for (int64_t& id : ids) id = below(n);
    if (ids.size() > 1 && chance(0.3)) ids.back() = ids.front();
    const Shape index_shape = single ? Shape() : Shape({static_cast<int64_t>(ids.size())});
    const bool i32 = chance(0.2);
    const Tensor index =
        i32 ? lt::from_vector(std::vector<int32_t>(ids.begin(), ids.end()), index_shape)
            : lt::from_vector(ids, index_shape);
    std::vector<int64_t> want = a.shape().to_vector();
    want[d] = static_cast<int64_t>(ids.size());
    if (count(want) > kMaxNumel) return false;
    const int dim = chance(0.3) ? d - r : d;
    const Tensor t = a.index_select(dim, index);
    const std::string name = fresh_name();
    const std::string text = "a.index_select(" + std::to_string(dim) + ", " +
                             (i32 ? "i32 " : "i64 ") + index_shape.str() + " " + list(ids) + ")";
    log(name + " = " + describe(text.c_str(), {i}, {}) + " -> " + t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    note_drawn("index_select");
    if (std::set<int64_t>(ids.begin(), ids.end()).size() < ids.size()) {
      note_drawn("index_select with repeated ids");
    }
    if (pool_[i].view) note_drawn("index_select of a view");
    add({t, std::make_shared<Bound>(*pool_[i].bound), name});
    return true;
  }

  // lt::embedding of i64 ids (rank 0 to 2, repeats likely) into a 2-D pool tensor or new leaf.
  bool embedding() {
    const std::vector<size_t> tables = slots_where(
        [](const Slot& x) { return x.t.dim() == 2 && x.t.shape()[0] > 0 && x.t.numel() <= 10000; });
    size_t w;
    if (tables.empty() || chance(0.3)) {
      add(new_leaf(Shape({1 + below(5), below(6)})));
      w = pool_.size() - 1;
    } else {
      w = tables[below_size(tables)];
    }
    const Tensor weight = pool_[w].t;
    std::vector<int64_t> dims(below(3));
    for (int64_t& d : dims) d = chance(0.05) ? 0 : 1 + below(3);
    std::vector<int64_t> ids(static_cast<size_t>(count(dims)));
    for (int64_t& id : ids) id = below(static_cast<int>(weight.shape()[0]));
    const Tensor index = lt::from_vector(ids, Shape(dims));
    std::vector<int64_t> want = dims;
    want.push_back(weight.shape()[1]);
    const Tensor t = lt::embedding(index, weight);
    const std::string name = fresh_name();
    const std::string text = "lt::embedding(i64 " + Shape(dims).str() + " " + list(ids) + ", a)";
    log(name + " = " + describe(text.c_str(), {w}, {}) + " -> " + t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(weight.dtype())) << name;
    note_drawn("embedding");
    add({t, std::make_shared<Bound>(*pool_[w].bound), name, engine_view(t)});
    return true;
  }

  // --- Comparisons, where, masked_fill, argmax. ---

  bool selection() {
    const int which = below(10);
    if (which < 4) return where();
    if (which < 8) return masked_fill();
    return comparison_value();
  }

  // A bool mask that broadcasts with `shape` (into it when `into`): a comparison of a tensor
  // with a scalar, or with another tensor, that the engine and the reference decide alike. Both
  // hold values within 2 err (the check's tolerance) of the reference's, so no compared pair may
  // come closer than that: the scalar is drawn in a wide enough gap of the reference's values.
  // Sets `text` to the comparison; nullopt when no safe one was found.
  std::optional<Tensor> mask(const Shape& shape, bool into, std::string& text) {
    static constexpr const char* kNames[] = {"gt", "lt", "ge", "le", "eq", "ne"};
    using Compare = Tensor (Tensor::*)(const Tensor&) const;
    using CompareScalar = Tensor (Tensor::*)(double) const;
    static constexpr Compare kTensor[] = {&Tensor::gt, &Tensor::lt, &Tensor::ge,
                                          &Tensor::le, &Tensor::eq, &Tensor::ne};
    static constexpr CompareScalar kScalar[] = {&Tensor::gt, &Tensor::lt, &Tensor::ge,
                                                &Tensor::le, &Tensor::eq, &Tensor::ne};
    const int op = chance(0.9) ? below(4) : 4 + below(2);
    const size_t i = operand(shape, into);
    if (chance(0.35)) {
      const Shape with = into ? shape : *broadcast(shape, pool_[i].t.shape());
      const size_t j = operand(with, into);
      const Tensor x = pool_[i].t, y = pool_[j].t;
      const DType dtype = op_dtype({x, y});
      const std::vector<Bound> bs = converted({i, j}, dtype).value_or(std::vector<Bound>{});
      // The values as the comparison sees them: cast to its dtype.
      std::vector<double> vx = lt::reference::evaluate(x), vy = lt::reference::evaluate(y);
      for (auto [v, from] : {std::pair{&vx, x.dtype()}, std::pair{&vy, y.dtype()}}) {
        if (!holds(dtype, from)) {
          for (double& e : *v) e = round_to(dtype, e);
        }
      }
      const Shape out = *broadcast(x.shape(), y.shape());
      const std::vector<int64_t> ix = positions(x.shape(), out), iy = positions(y.shape(), out);
      bool safe = !bs.empty();
      const double margin = safe ? 2 * (bs[0].err + bs[1].err) +
                                       1e-12 * (bs[0].mag() + bs[0].err + bs[1].mag() + bs[1].err)
                                 : 0;
      for (size_t e = 0; e < ix.size() && safe; ++e) {
        safe = std::abs(vx[ix[e]] - vy[iy[e]]) > margin;
      }
      if (safe) {
        text = pool_[i].name + "." + kNames[op] + "(" + pool_[j].name + ")";
        note_drawn("comparison of two tensors");
        if (pool_[i].view || pool_[j].view) note_drawn("comparison of a view");
        const Tensor m = (x.*kTensor[op])(y);
        note_dtypes(dtype, {x, y});
        std::vector<double> expected;
        for (size_t e = 0; e < ix.size(); ++e) expected.push_back(decide(op, vx[ix[e]], vy[iy[e]]));
        if (!reference_is(m, expected, text)) return std::nullopt;
        return m;
      }
    }
    const Tensor x = pool_[i].t;
    const Bound& b = *pool_[i].bound;
    const std::vector<double> values = lt::reference::evaluate(x);
    std::vector<double> v = values;
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    const double margin = 2 * b.err + 1e-12 * (b.mag() + b.err);
    // The threshold as the kernel sees it: in x's dtype (a scalar of a bf16 or f16 op is
    // rounded to it, as PyTorch's are).
    auto in_dtype = [&](double s) { return round_to(x.dtype(), s); };
    std::vector<double> gaps;  // thresholds between two values, splitting the tensor
    for (size_t k = 0; k + 1 < v.size(); ++k) {
      if (v[k + 1] - v[k] > 2 * margin) gaps.push_back(in_dtype(v[k] + (v[k + 1] - v[k]) / 2));
    }
    double s;
    if (!gaps.empty() && chance(0.85)) {
      s = gaps[below_size(gaps)];
    } else if (v.empty()) {
      s = in_dtype(scalars(Draw::any)[0]);
    } else {  // beyond every value: a constant mask
      s = in_dtype(chance(0.5) ? v.front() - 2 * margin - uniform(0, 1)
                               : v.back() + 2 * margin + uniform(0, 1));
    }
    for (double e : v) {
      if (!(std::abs(e - s) > margin)) return std::nullopt;
    }
    std::ostringstream threshold;
    threshold.precision(17);
    threshold << s;
    text = pool_[i].name + "." + kNames[op] + "(" + threshold.str() + ")";
    note_drawn("comparison with a scalar");
    if (pool_[i].view) note_drawn("comparison of a view");
    const Tensor m = (x.*kScalar[op])(s);
    note_dtypes(x.dtype(), {x});
    std::vector<double> expected;
    for (double e : values) expected.push_back(decide(op, e, s));
    if (!reference_is(m, expected, text)) return std::nullopt;
    return m;
  }

  // Comparison `op` (gt, lt, ge, le, eq, ne) of a and b, as 1 or 0.
  static double decide(int op, double a, double b) {
    const bool kept[] = {a > b, a < b, a >= b, a <= b, a == b, a != b};
    return kept[op] ? 1 : 0;
  }

  // Whether t's reference values are `expected` (where the test knows a discrete op's result:
  // a comparison, an argmax); a failure otherwise.
  bool reference_is(const Tensor& t, const std::vector<double>& expected, const std::string& text) {
    const std::vector<double> got = lt::reference::evaluate(t);
    for (size_t e = 0; e < std::max(got.size(), expected.size()); ++e) {
      if (e >= got.size() || e >= expected.size() || !(got[e] == expected[e])) {
        fail(text + ": the reference's element " + std::to_string(e) + " is " +
             (e < got.size() ? std::to_string(got[e]) : "missing") + ", expected " +
             (e < expected.size() ? std::to_string(expected[e]) : "none"));
        return false;
      }
    }
    return true;
  }

  bool where() {
    const size_t ia = below(static_cast<int>(pool_.size()));
    const size_t ib = operand(pool_[ia].t.shape(), /*into=*/false);
    const Shape ab = *broadcast(pool_[ia].t.shape(), pool_[ib].t.shape());
    const Tensor a = pool_[ia].t, b = pool_[ib].t;
    const DType dtype = op_dtype({a, b});
    const std::optional<std::vector<Bound>> bs = converted({ia, ib}, dtype);
    if (!bs) return false;
    std::string condition;
    const std::optional<Tensor> m = mask(ab, /*into=*/false, condition);
    if (!m) return false;
    const Shape shape = *broadcast(ab, m->shape());
    const Tensor t = lt::where(*m, a, b);
    const std::string name = fresh_name();
    const std::string text = "lt::where(" + condition + ", a, b)";
    log(name + " = " + describe(text.c_str(), {ia, ib}, {}) + " -> " + lt::dtype_name(t.dtype()) +
        " " + t.shape().str());
    EXPECT_EQ(t.shape().str(), shape.str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype)) << name;
    note_drawn("where");
    note_dtypes(dtype, {a, b});
    add({t, std::make_shared<Bound>(bounds::hull((*bs)[0], (*bs)[1])), name});
    return true;
  }

  bool masked_fill() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const Shape shape = pool_[i].t.shape();
    std::string condition;
    const std::optional<Tensor> m = mask(shape, /*into=*/true, condition);
    if (!m) return false;
    const Tensor a = pool_[i].t;
    const std::vector<double> s = scalars(Draw::any);
    const Tensor t = a.masked_fill(*m, s[0]);
    const std::string name = fresh_name();
    const std::string text = "a.masked_fill(" + condition + ", s)";
    log(name + " = " + describe(text.c_str(), {i}, s) + " -> " + t.shape().str());
    EXPECT_EQ(t.shape().str(), shape.str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    note_drawn("masked_fill");
    note_dtypes(a.dtype(), {a});
    const Bound result = bounds::hull(*pool_[i].bound, bounds::scalar(s[0], unit(a.dtype())));
    add({t, std::make_shared<Bound>(result), name});
    return true;
  }

  // A comparison kept as 0/1 values.
  bool comparison_value() {
    std::string condition;
    const std::optional<Tensor> m =
        mask(pool_[below(static_cast<int>(pool_.size()))].t.shape(), /*into=*/false, condition);
    if (!m) return false;
    const DType to = draw_dtype();
    const Tensor t = m->to(to);
    const std::string name = fresh_name();
    log(name + " = " + condition + ".to(" + lt::dtype_name(to) + ") -> " + t.shape().str());
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(to)) << name;
    note_drawn("comparison as a value");
    add({t, std::make_shared<Bound>(Bound{0, 1, 0}), name});
    return true;
  }

  // argmax over all elements or along a dim, as positions of a float dtype. Drawn only where the
  // engine cannot pick another element than the reference: values without error (the same in
  // both, ties included), or a maximum ahead of every other element of its run by more than
  // both sides' errors. The reference's positions are checked against the first maxima of its
  // values.
  bool argmax() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const Tensor x = pool_[i].t;
    if (x.numel() == 0) return false;
    const std::vector<int64_t> s = x.shape().to_vector();
    const int r = x.dim();
    const bool all = r == 0 || chance(0.3);
    const int d = all ? 0 : below(r);
    const bool keepdim = chance(0.5);
    const int64_t n = all ? x.numel() : s[d];
    const int64_t inner = all ? 1 : count(std::vector<int64_t>(s.begin() + d + 1, s.end()));
    const Bound& b = *pool_[i].bound;
    const std::vector<double> v = lt::reference::evaluate(x);
    const double margin = 4 * b.err + 2e-12 * (b.mag() + b.err);
    std::vector<double> expected;  // the first maximum of each run
    for (int64_t o = 0; o < x.numel() / (n * inner); ++o) {
      for (int64_t e = 0; e < inner; ++e) {
        auto at = [&](int64_t j) { return v[(o * n + j) * inner + e]; };
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j) best = at(j) > at(best) ? j : best;
        int close = 0;
        for (int64_t j = 0; j < n; ++j) close += at(j) >= at(best) - margin;
        if (b.err > 0 && close > 1) return false;
        expected.push_back(static_cast<double>(best));
      }
    }
    const int dim = chance(0.3) ? d - r : d;
    const Tensor index = all ? x.argmax() : x.argmax(dim, keepdim);
    EXPECT_STREQ(lt::dtype_name(index.dtype()), "i64");
    if (!reference_is(index, expected, "argmax of " + pool_[i].name)) return true;
    std::vector<int64_t> want;
    if (!all) {
      want = s;
      if (keepdim) {
        want[d] = 1;
      } else {
        want.erase(want.begin() + d);
      }
    }
    // Positions below 256 are exact in every float dtype; up to 66000 in f32 and f64.
    const DType to = n <= 256                               ? draw_dtype()
                     : options_.mixed_dtypes && chance(0.3) ? DType::f64
                                                            : DType::f32;
    const Tensor t = index.to(to);
    const std::string name = fresh_name();
    const std::string text =
        std::string("a.argmax(") +
        (all ? "" : std::to_string(dim) + ", " + (keepdim ? "true" : "false")) + ").to(" +
        lt::dtype_name(to) + ")";
    log(name + " = " + describe(text.c_str(), {i}, {}) + " -> " + t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    note_drawn("argmax");
    if (!all) note_drawn("argmax along a dim");
    if (pool_[i].view) note_drawn("argmax of a view");
    add({t, std::make_shared<Bound>(Bound{0, static_cast<double>(n - 1), 0}), name});
    return true;
  }

  // --- Matrix products. ---

  // Makes pool_[i] and pool_[j] one dtype (products take no mixed dtypes) by casting one (not
  // to f16 beyond its range), and not f16, which has no matrix product: f16 operands are cast to
  // f32 or bf16, or now and then given to `product`, which must refuse them (lt::Error). True
  // when the product was refused.
  bool same_dtype(size_t& i, size_t& j, const char* text,
                  const std::function<Tensor(const Tensor&, const Tensor&)>& product) {
    const DType di = pool_[i].t.dtype(), dj = pool_[j].t.dtype();
    if (di != dj) {
      auto fits = [&](size_t k, DType to) { return pool_[k].bound->mag() <= max_magnitude(to); };
      const bool cast_i = chance(0.5) ? fits(i, dj) : !fits(j, di);
      if (cast_i) {
        i = add_cast(i, dj);
      } else {
        j = add_cast(j, di);
      }
    }
    if (pool_[i].t.dtype() != DType::f16) return false;
    if (chance(0.3)) {
      log(describe(text, {i, j}, {}) + " (f16: refused)");
      bool refused = false;
      try {
        product(pool_[i].t, pool_[j].t);
      } catch (const lt::Error&) {
        refused = true;
      }
      if (!refused) fail(std::string(text) + " of f16 tensors was not refused");
      note_drawn("f16 product (refused)");
      return true;
    }
    const DType to = chance(0.5) ? DType::f32 : DType::bf16;
    i = add_cast(i, to);
    j = add_cast(j, to);
    return false;
  }

  // The second operand of a product whose inner size is `k`: a pool tensor that fits as it
  // is, one that fits transposed (a view), or a new leaf of `shape`.
  size_t second_operand(const std::function<bool(const Shape&)>& fits,
                        const std::function<bool(const Shape&)>& fits_transposed,
                        const Shape& shape, bool& transposed) {
    const std::vector<size_t> direct =
        slots_where([&](const Slot& x) { return fits(x.t.shape()); });
    const std::vector<size_t> flipped =
        slots_where([&](const Slot& x) { return x.t.dim() >= 2 && fits_transposed(x.t.shape()); });
    const int pick = below(10);
    if (pick < 4 && !direct.empty()) return direct[below_size(direct)];
    if (pick < 7 && !flipped.empty()) {
      transposed = true;
      return add_transposed(flipped[below_size(flipped)]);
    }
    add(new_leaf(shape));
    return pool_.size() - 1;
  }

  // Whether a product of `want` elements, each a sum of k terms, keeps the run time small.
  static bool small_product(const std::vector<int64_t>& want, int64_t k) {
    return count(want) <= 100000 && count(want) * std::max<int64_t>(k, 1) <= 1000000;
  }

  // A size for a product's free dim: mostly small, sometimes 0.
  int64_t free_size() { return chance(0.04) ? 0 : 1 + below(5); }

  // lt::matmul (or a.matmul(b)): 1-D operands, broadcast batch dims, transposed views.
  bool matmul() {
    const std::vector<size_t> ranked = slots_where([](const Slot& x) { return x.t.dim() > 0; });
    if (ranked.empty()) return false;
    size_t ia = ranked[below_size(ranked)];
    bool transposed = false;
    if (pool_[ia].t.dim() >= 2 && chance(0.25)) {
      ia = add_transposed(ia);
      transposed = true;
    }
    const Shape sa = pool_[ia].t.shape();
    const int ra = sa.rank();
    const int64_t k = sa[ra - 1];
    const Shape batch_a = leading(sa, std::max(ra - 2, 0));
    auto batch_fits = [&](const Shape& s) {
      return ra < 2 || broadcast(batch_a, leading(s, s.rank() - 2)).has_value();
    };
    std::vector<int64_t> dims;
    if (chance(0.15)) {
      dims = {k};
    } else {
      if (ra >= 2) {
        dims = sub_shape(batch_a).to_vector();
        if (chance(0.2) && static_cast<int>(dims.size()) == batch_a.rank() && ra < 5) {
          dims.insert(dims.begin(), 2);  // a batch dim that a's batch broadcasts to
        }
      } else {
        dims.resize(below(3));
        for (int64_t& d : dims) d = 1 + below(3);
      }
      dims.push_back(k);
      dims.push_back(free_size());
    }
    size_t ib = second_operand(
        [&](const Shape& s) {
          if (s.rank() == 1) return s[0] == k;
          return s.rank() >= 2 && s[s.rank() - 2] == k && batch_fits(s);
        },
        [&](const Shape& s) { return s[s.rank() - 1] == k && batch_fits(s); }, Shape(dims),
        transposed);
    if (same_dtype(ia, ib, "lt::matmul(a, b)",
                   [](const Tensor& a, const Tensor& b) { return lt::matmul(a, b); })) {
      return true;
    }
    const Tensor a = pool_[ia].t, b = pool_[ib].t;
    const Shape sb = b.shape();
    const int rb = sb.rank();
    std::vector<int64_t> want;
    if (ra == 1 && rb >= 2) {
      want = leading(sb, rb - 2).to_vector();
      want.push_back(sb[rb - 1]);
    } else if (ra >= 2 && rb == 1) {
      want = batch_a.to_vector();
      want.push_back(sa[ra - 2]);
    } else if (ra >= 2) {
      want = broadcast(batch_a, leading(sb, rb - 2))->to_vector();
      want.push_back(sa[ra - 2]);
      want.push_back(sb[rb - 1]);
    }
    const Bound result = bounds::dot(*pool_[ia].bound, *pool_[ib].bound, k, unit(a.dtype()));
    if (!acceptable(result, a.dtype(), {ia, ib}) || !small_product(want, k)) return false;
    const bool method = chance(0.5);
    const Tensor t = method ? a.matmul(b) : lt::matmul(a, b);
    const std::string name = fresh_name();
    log(name + " = " + describe(method ? "a.matmul(b)" : "lt::matmul(a, b)", {ia, ib}, {}) +
        " -> " + lt::dtype_name(t.dtype()) + " " + t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    note_drawn("matmul");
    if (a.dtype() == DType::bf16) note_drawn("bf16 product");
    if (ra == 1 || rb == 1) note_drawn("matmul with a 1-D operand");
    if (ra >= 2 && rb >= 2 && leading(sa, ra - 2) != leading(sb, rb - 2)) {
      note_drawn("matmul with batch broadcasting");
    }
    if (any_view({ia, ib}))
      note_drawn(transposed ? "matmul of a transposed view" : "matmul of a view");
    add({t, std::make_shared<Bound>(result), name, engine_view(t)});
    return true;
  }

  // lt::bmm of [B, M, K] and [B, K, N].
  bool bmm() {
    const std::vector<size_t> cubes = slots_where([](const Slot& x) { return x.t.dim() == 3; });
    size_t ia;
    if (cubes.empty() || chance(0.3)) {
      add(new_leaf(Shape({1 + below(3), free_size(), free_size()})));
      ia = pool_.size() - 1;
    } else {
      ia = cubes[below_size(cubes)];
    }
    bool transposed = false;
    if (chance(0.25)) {
      ia = add_transposed(ia);
      transposed = true;
    }
    const Shape sa = pool_[ia].t.shape();
    const int64_t batch = sa[0], k = sa[2];
    size_t ib =
        second_operand([&](const Shape& s) { return s.rank() == 3 && s[0] == batch && s[1] == k; },
                       [&](const Shape& s) { return s.rank() == 3 && s[0] == batch && s[2] == k; },
                       Shape({batch, k, free_size()}), transposed);
    if (same_dtype(ia, ib, "lt::bmm(a, b)",
                   [](const Tensor& a, const Tensor& b) { return lt::bmm(a, b); })) {
      return true;
    }
    const Tensor a = pool_[ia].t, b = pool_[ib].t;
    const Shape want({batch, sa[1], b.shape()[2]});
    const Bound result = bounds::dot(*pool_[ia].bound, *pool_[ib].bound, k, unit(a.dtype()));
    if (!acceptable(result, a.dtype(), {ia, ib}) || !small_product(want.to_vector(), k)) {
      return false;
    }
    const Tensor t = lt::bmm(a, b);
    const std::string name = fresh_name();
    log(name + " = " + describe("lt::bmm(a, b)", {ia, ib}, {}) + " -> " +
        lt::dtype_name(t.dtype()) + " " + t.shape().str());
    EXPECT_EQ(t.shape().str(), want.str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    note_drawn("bmm");
    if (a.dtype() == DType::bf16) note_drawn("bf16 product");
    if (any_view({ia, ib}))
      note_drawn(transposed ? "matmul of a transposed view" : "matmul of a view");
    add({t, std::make_shared<Bound>(result), name, engine_view(t)});
    return true;
  }

  // lt::linear(x, w, bias): w [out, in] from the pool (as it is or transposed) or a new leaf,
  // a bias [out] half of the time.
  bool linear() {
    const std::vector<size_t> ranked = slots_where([](const Slot& x) { return x.t.dim() > 0; });
    if (ranked.empty()) return false;
    size_t ix = ranked[below_size(ranked)];
    const Shape sx = pool_[ix].t.shape();
    const int64_t in = sx[sx.rank() - 1];
    bool transposed = false;
    size_t iw = second_operand([&](const Shape& s) { return s.rank() == 2 && s[1] == in; },
                               [&](const Shape& s) { return s.rank() == 2 && s[0] == in; },
                               Shape({free_size(), in}), transposed);
    if (same_dtype(ix, iw, "lt::linear(a, b)",
                   [](const Tensor& x, const Tensor& w) { return lt::linear(x, w); })) {
      return true;
    }
    const Tensor x = pool_[ix].t, w = pool_[iw].t;
    const int64_t out = w.shape()[0];
    Bound result = bounds::dot(*pool_[ix].bound, *pool_[iw].bound, in, unit(x.dtype()));
    DType dtype = x.dtype();
    std::vector<size_t> in_slots = {ix, iw};
    if (chance(0.6)) {
      const std::vector<size_t> biases =
          slots_where([&](const Slot& y) { return y.t.dim() == 1 && y.t.shape()[0] == out; });
      if (biases.empty() || chance(0.3)) {
        add(new_leaf(Shape({out})));
        in_slots.push_back(pool_.size() - 1);
      } else {
        in_slots.push_back(biases[below_size(biases)]);
      }
      dtype = lt::promote_types(dtype, pool_[in_slots[2]].t.dtype());
      const Bound bias = *pool_[in_slots[2]].bound;  // of a dtype that dtype holds
      result = bounds::round(bounds::add(result, bias), unit(dtype));
    }
    std::vector<int64_t> want = leading(sx, sx.rank() - 1).to_vector();
    want.push_back(out);
    if (!acceptable(result, dtype, in_slots) || !small_product(want, in)) return false;
    const Tensor bias = in_slots.size() == 3 ? pool_[in_slots[2]].t : Tensor();
    const Tensor t = lt::linear(x, w, bias);
    const std::string name = fresh_name();
    log(name + " = " +
        describe(bias.defined() ? "lt::linear(a, b, c)" : "lt::linear(a, b)", in_slots, {}) +
        " -> " + lt::dtype_name(t.dtype()) + " " + t.shape().str());
    EXPECT_EQ(t.shape().str(), Shape(want).str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype)) << name;
    note_drawn("linear");
    if (x.dtype() == DType::bf16) note_drawn("bf16 product");
    if (bias.defined()) note_drawn("linear with bias");
    if (any_view(in_slots)) note_drawn("linear of a view");
    add({t, std::make_shared<Bound>(result), name, engine_view(t)});
    return true;
  }

  // --- Helpers. ---

  // Compares the engine's value with the reference, and the reference with the bound.
  void check(const Slot& slot, const std::vector<double>& want, const std::string& when) {
    const std::vector<double> got = slot.t.to_vector<double>();
    const Bound& b = *slot.bound;
    if (got.size() != want.size() || static_cast<int64_t>(got.size()) != slot.t.numel()) {
      fail(slot.name + " " + when + ": " + std::to_string(got.size()) + " values, reference has " +
           std::to_string(want.size()));
      return;
    }
    const double slack = 1e-12 * (b.mag() + b.err);  // the bound's own rounding
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = 2 * b.err + slack;
      if (!(std::abs(got[i] - want[i]) <= tol)) {
        std::ostringstream out;
        out.precision(17);
        out << slot.name << " " << when << ": element " << i << " is " << got[i] << ", reference "
            << want[i] << " (tolerance " << tol << ")";
        fail(out.str());
        return;
      }
      // The reference is exact but for its casts to f32, which round as the engine's do.
      if (!(want[i] >= b.lo - b.err - slack && want[i] <= b.hi + b.err + slack)) {
        std::ostringstream out;
        out.precision(17);
        out << slot.name << " " << when << ": reference element " << i << " is " << want[i]
            << ", outside the bound [" << b.lo << ", " << b.hi << "]";
        fail(out.str());
        return;
      }
    }
  }

  void fail(const std::string& message) {
    ADD_FAILURE() << message;
    failed_ = true;
  }

  // An operand for a value of `shape`: one that broadcasts with it, or into it (in place).
  // Views reshape tensors, so broadcasting could grow a result past kMaxNumel: not those.
  size_t operand(const Shape& shape, bool into) {
    std::vector<size_t> candidates;
    for (size_t i = 0; i < pool_.size(); ++i) {
      const std::optional<Shape> b = broadcast(shape, pool_[i].t.shape());
      if (b && (!into || *b == shape) && b->numel() <= std::max(kMaxNumel, shape.numel())) {
        candidates.push_back(i);
      }
    }
    if (candidates.empty() || chance(0.15)) {
      add(new_leaf(sub_shape(shape)));
      return pool_.size() - 1;
    }
    return candidates[below(static_cast<int>(candidates.size()))];
  }

  // The operands' bounds, with the rounding of those cast down to the op's dtype; nullopt when
  // one is beyond the dtype's range (max_magnitude).
  std::optional<std::vector<Bound>> converted(const std::vector<size_t>& in, DType dtype) const {
    std::vector<Bound> out;
    for (size_t i : in) {
      Bound b = *pool_[i].bound;
      if (!holds(dtype, pool_[i].t.dtype())) {
        if (b.mag() > max_magnitude(dtype)) return std::nullopt;
        b = bounds::round(b, unit(dtype));
      }
      out.push_back(b);
    }
    return out;
  }

  // The largest magnitude drawn for a value of `dtype`: f16's largest finite value is 65504, and
  // no op drawn from values up to 1e3 leaves its range (one computed in f32 cannot overflow).
  static double max_magnitude(DType dtype) { return dtype == DType::f16 ? 1e3 : 1e6; }

  // The largest error bound drawn, relative to the magnitude (or to 1 below it): 1e-3 for f32 and
  // f64; 16 units for bf16 and f16, whose every result is rounded by up to one.
  static double max_error(DType dtype) {
    const double store = unit(dtype).store;
    return store > 0 ? 16 * store : 1e-3;
  }

  // Whether a value of `dtype` computed from pool_[in] under bound b is drawn: finite, within the
  // dtype's range, and with an error bound that does not swamp it (as loose as that of the least
  // precise of its dtype and its operands': an f32 value computed from bf16 ones keeps their
  // error).
  bool acceptable(const Bound& b, DType dtype, const std::vector<size_t>& in) const {
    double limit = max_error(dtype);
    for (size_t i : in) limit = std::max(limit, max_error(pool_[i].t.dtype()));
    return std::isfinite(b.lo) && std::isfinite(b.hi) && std::isfinite(b.err) &&
           b.mag() <= max_magnitude(dtype) && b.err <= limit * std::max(1.0, b.mag());
  }

  // A float dtype for a new tensor: f32 mostly, f64 30% of the time, bf16 and f16 5% each.
  DType draw_dtype() {
    if (!options_.mixed_dtypes) return DType::f32;
    const int pick = below(100);
    if (pick < 30) return DType::f64;
    if (options_.half_dtypes && pick < 35) return DType::bf16;
    if (options_.half_dtypes && pick < 40) return DType::f16;
    return DType::f32;
  }

  // Counts an op computing in `dtype` on `operands`, by the 16-bit dtypes involved.
  static void note_dtypes(DType dtype, const std::vector<Tensor>& operands) {
    if (dtype == DType::bf16) note_drawn("bf16 op");
    if (dtype == DType::f16) note_drawn("f16 op");
    bool bf16 = false, f16 = false;
    for (const Tensor& t : operands) {
      bf16 = bf16 || t.dtype() == DType::bf16;
      f16 = f16 || t.dtype() == DType::f16;
    }
    if (bf16 && f16 && dtype == DType::f32) note_drawn("bf16 with f16 (an f32 op)");
  }

  // A tensor of `dtype` holding `values` (values of the dtype).
  static Tensor upload(const std::vector<double>& values, const Shape& shape, DType dtype) {
    switch (dtype) {
      case DType::f64:
        return lt::from_vector(values, shape);
      case DType::bf16:
      case DType::f16: {
        std::vector<uint16_t> bits;
        for (double v : values) bits.push_back(half_bits(dtype, v));
        return lt::from_host(bits.data(), shape, dtype);
      }
      default:
        return lt::from_vector(std::vector<float>(values.begin(), values.end()), shape);
    }
  }

  Slot new_leaf(const Shape& shape) {
    const DType dtype = draw_dtype();
    const std::string name = fresh_name();
    const char* what = "";
    Tensor t;
    Bound b;
    static constexpr int kKinds[] = {0, 0, 0, 0, 1, 2, 3, 4, 5, 5};  // mostly varied data
    switch (kKinds[below(10)]) {
      case 0: {
        static constexpr double kRanges[][2] = {{-2, 2}, {0.5, 2}, {-2, -0.5}};
        const auto& range = kRanges[below(3)];
        std::vector<double> values(static_cast<size_t>(shape.numel()));
        for (double& v : values) v = round_to(dtype, uniform(range[0], range[1]));
        t = upload(values, shape, dtype);
        if (!values.empty()) {
          b = {*std::min_element(values.begin(), values.end()),
               *std::max_element(values.begin(), values.end()), 0};
        }
        what = "from_vector";
        break;
      }
      case 1:
        t = lt::zeros(shape, dtype);
        what = "zeros";
        break;
      case 2:
        t = lt::ones(shape, dtype);
        b = {1, 1, 0};
        what = "ones";
        break;
      case 3: {
        const double v = scalars(Draw::any)[0];
        t = lt::full(shape, v, dtype);
        b = bounds::scalar(v, unit(dtype));
        what = "full";
        break;
      }
      case 4:
        t = lt::rand(shape, rng_(), dtype);
        b = {0, 1, 0};
        what = "rand";
        break;
      default:
        t = lt::randn(shape, rng_(), dtype);
        // Box-Muller over 53-bit uniforms stays within 8.6, rounded to the dtype.
        b = {-round_to(dtype, 8.6), round_to(dtype, 8.6), 0};
        what = "randn";
        break;
    }
    log(name + " = " + what + " " + lt::dtype_name(dtype) + " " + shape.str());
    return {t, std::make_shared<Bound>(b), name};
  }

  Shape draw_base() {
    if (options_.large_shapes && chance(0.08)) {
      // Several interpreter tiles, gathered tiles and work units; split reductions.
      static const Shape kLarge[] = {{66001}, {3, 1031}, {1031, 1, 5}};
      return kLarge[below(3)];
    }
    static constexpr int64_t kDims[] = {1, 2, 3, 4, 5, 7};
    std::vector<int64_t> dims(below(4));
    for (int64_t& d : dims) d = kDims[below(6)];
    if (!dims.empty() && chance(0.15)) dims[below(static_cast<int>(dims.size()))] = 0;
    return Shape(dims);
  }

  // A shape that broadcasts into `of`: a suffix of its dims, some of them 1.
  Shape sub_shape(const Shape& of) {
    const int rank = chance(0.7) ? of.rank() : below(of.rank() + 1);
    std::vector<int64_t> dims;
    for (int d = of.rank() - rank; d < of.rank(); ++d) dims.push_back(chance(0.25) ? 1 : of[d]);
    return Shape(dims);
  }

  std::vector<double> scalars(Draw draw) {
    static constexpr double kNice[] = {0, 1, -1, 0.5, -0.5, 2, -2, 0.1, 3};
    auto any = [&] { return chance(0.5) ? kNice[below(9)] : uniform(-3, 3); };
    switch (draw) {
      case Draw::none:
        return {};
      case Draw::any:
        return {any()};
      case Draw::nonzero: {
        double s = any();
        while (std::abs(s) < 0.25) s = any();
        return {s};
      }
      case Draw::weight:
        return {chance(0.5) ? kNice[below(5)] : uniform(-0.5, 1.5)};
      case Draw::exponent: {
        static constexpr double kExponents[] = {2, 3, 0.5, -0.5, 1.5, -1, 1, 0, 2.5};
        return {kExponents[below(9)]};
      }
      case Draw::range: {
        const double lo = any();
        return {lo, lo + std::abs(any())};
      }
    }
    return {};
  }

  std::string describe(const char* text, const std::vector<size_t>& in,
                       const std::vector<double>& s) const {
    std::ostringstream out;
    out << text << "  [";
    for (size_t k = 0; k < in.size(); ++k)
      out << (k ? ", " : "") << "abc"[k] << "=" << pool_[in[k]].name;
    out.precision(17);  // enough to replay the op by hand
    for (size_t k = 0; k < s.size(); ++k) out << ", s" << (k ? "1" : "") << "=" << s[k];
    out << "]";
    return out.str();
  }

  // Whether the engine flags `t` as a view (TensorState::is_view), refusing in-place ops on it.
  // Besides the view ops' results, some ops return a view of their own result: matmul with a
  // 1-D operand (squeezed), embedding (reshaped).
  static bool engine_view(const Tensor& t) {
    const lt::trace::TensorState* state = lt::trace::find_state(*t.impl());
    const bool view = state != nullptr && state->is_view;
    if (view) note_drawn("op result flagged as a view");
    return view;
  }

  std::vector<size_t> slots_where(const std::function<bool(const Slot&)>& pred) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pred(pool_[i])) out.push_back(i);
    }
    return out;
  }

  bool any_view(const std::vector<size_t>& in) const {
    return std::any_of(in.begin(), in.end(), [&](size_t i) { return pool_[i].view; });
  }

  // A random factorization of n into 0 to 4 sizes (1 to 3 with a 0 when n is 0).
  std::vector<int64_t> factor(int64_t n) {
    if (n == 0) {
      std::vector<int64_t> dims(1 + below(3));
      for (int64_t& d : dims) d = below(4);
      dims[below_size(dims)] = 0;
      return dims;
    }
    std::vector<int64_t> dims(n == 1 ? below(4) : 1 + below(4), 1);
    for (int64_t p = 2; n > 1; ++p) {
      if (p * p > n) p = n;
      for (; n % p == 0; n /= p) dims[below_size(dims)] *= p;
    }
    return dims;
  }

  static int64_t count(const std::vector<int64_t>& sizes) {
    int64_t n = 1;
    for (int64_t size : sizes) n *= size;
    return n;
  }

  // The first n dims of s.
  static Shape leading(const Shape& s, int n) {
    return Shape(std::vector<int64_t>(s.begin(), s.begin() + n));
  }

  static std::vector<int64_t> permuted(const std::vector<int64_t>& s,
                                       const std::vector<int>& order) {
    std::vector<int64_t> out;
    for (int d : order) out.push_back(s[d]);
    return out;
  }

  // Whether dims taken in `order` keep a contiguous layout in order: the dims of size other
  // than 1 keep their order.
  static bool keeps_order(const std::vector<int64_t>& s, const std::vector<int>& order) {
    int last = -1;
    for (int d : order) {
      if (s[d] == 1) continue;
      if (d < last) return false;
      last = d;
    }
    return true;
  }

  // Whether every step-th element of dim d, `length` of them, of a contiguous tensor of sizes s
  // are in order: one run of memory.
  static bool slice_in_order(const std::vector<int64_t>& s, int d, int64_t length, int64_t step) {
    if (step != 1 && length > 1) return false;
    if (length == s[d]) return true;
    for (int e = 0; e < d; ++e) {
      if (s[e] != 1) return false;
    }
    return true;
  }

  // For each element of `out`, the position of its value in `in`, which broadcasts to it.
  static std::vector<int64_t> positions(const Shape& in, const Shape& out) {
    std::vector<int64_t> index(static_cast<size_t>(out.numel()));
    const int offset = out.rank() - in.rank();
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t rest = i, at = 0, stride = 1;
      for (int d = out.rank() - 1; d >= offset; --d) {
        const int64_t coord = rest % out[d];
        rest /= out[d];
        if (in[d - offset] != 1) at += coord * stride;
        stride *= in[d - offset];
      }
      index[static_cast<size_t>(i)] = at;
    }
    return index;
  }

  template <class T>
  static std::string list(const std::vector<T>& values) {
    std::string out = "{";
    for (size_t k = 0; k < values.size(); ++k) {
      out += (k ? ", " : "") + std::to_string(values[k]);
    }
    return out += "}";
  }

  void add(Slot slot) { pool_.push_back(std::move(slot)); }
  void log(const std::string& line) { trace_ << line << "\n"; }
  std::string fresh_name() {
    std::string name = "t";  // appended, not "t" + ...: GCC 12 warns wrongly on that (-Wrestrict)
    return name += std::to_string(next_name_++);
  }

  int below(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <class C>
  int below_size(const C& c) {
    return below(static_cast<int>(c.size()));
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }

  // The most elements a value may grow to by broadcasting, cat or index_select (the large
  // base shapes have up to 66001).
  static constexpr int64_t kMaxNumel = 100000;

  // Far beyond any program's run time, native compiles on a busy machine included.
  static constexpr double kHangSeconds = 120;

  const ProgramOptions options_;
  std::mt19937_64 rng_;
  const std::string label_;
  Shape base_;
  std::vector<Slot> pool_;
  std::ostringstream trace_;
  int next_name_ = 0;
  bool failed_ = false;
};

}  // namespace lt_test
