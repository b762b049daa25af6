// SPDX-License-Identifier: Apache-2.0
/*
 * _torch.cpp — the torch.distributed backend "strata": a c10d::Backend over strata.h.
 *
 * strata/torch.py registers create_backend with torch.distributed.Backend for the "cpu" and
 * "cuda" devices. torch calls it for the default group and for each new_group with that group's
 * store (a PrefixStore over the job's TCPStore, so MASTER_ADDR/MASTER_PORT are all a job needs),
 * the rank in the group, its size and the timeout; split_group comes through split(). Each group
 * is its own communicator, joined through that store by strata_comm_init_store; its
 * configuration is the environment's STRATA_* knobs, set further by name (strata_config_set).
 *
 * Every operation is a plan: one or more non-blocking strata calls started on the caller's
 * thread, so calls are numbered in the caller's order, the order every rank must agree on. The
 * plan goes to the group's completion thread, which waits for its requests in the order they
 * started, runs what must follow (copying list forms out of their flat buffers, device tensors
 * back from their host copies), then completes the Work and its Future. That thread exists
 * because DDP's reducer waits on the Future, not on the Work: something other than the caller
 * has to complete it. A Work holds every tensor strata reads or writes until its requests
 * complete, since strata owns those buffers until then.
 *
 * Wire types. strata's dtypes carry most of torch's; bool travels as uint8 with each op mapped
 * to its logical meaning (sum and max are "or", product and min "and"), complex tensors as
 * their real and imaginary parts (sum, avg and premul_sum only, as torch allows on complex).
 * PREMUL_SUM multiplies by its factor, then sums. Uneven all-to-all pads every block to the
 * largest one the ranks agree on (one small allreduce), then runs strata's all-to-all.
 *
 * Devices. A tensor on any device other than the CPU is staged through a pinned host copy: the
 * copy in is made on the caller's thread before the strata call starts (it waits for the work
 * the caller queued on that device's current stream), the copy out on the completion thread
 * before the Work completes, so a waited Work's tensors hold the result on their device.
 */
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata.h"

namespace {

std::string failure_text(const char *what, int status) {
  return std::string("strata: ") + what + " failed: " + strata_err_name(status) + ": " +
         strata_strerror(status);
}

// How a tensor travels: strata's dtype and how many wire elements one tensor element is.
struct Wire {
  strata_dtype dtype;
  int64_t per_element;
  bool is_bool;
  bool is_complex;
};

Wire wire_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return {STRATA_F32, 1, false, false};
    case at::kDouble:
      return {STRATA_F64, 1, false, false};
    case at::kHalf:
      return {STRATA_F16, 1, false, false};
    case at::kBFloat16:
      return {STRATA_BF16, 1, false, false};
    case at::kChar:
      return {STRATA_I8, 1, false, false};
    case at::kByte:
      return {STRATA_U8, 1, false, false};
    case at::kShort:
      return {STRATA_I16, 1, false, false};
    case at::kInt:
      return {STRATA_I32, 1, false, false};
    case at::kLong:
      return {STRATA_I64, 1, false, false};
    case at::kBool:
      return {STRATA_U8, 1, true, false};
    case at::kComplexFloat:
      return {STRATA_F32, 2, false, true};
    case at::kComplexDouble:
      return {STRATA_F64, 2, false, true};
    default:
      TORCH_CHECK_TYPE(false, "strata: no strata dtype for ", type,
                       " (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
                       "float64, complex64, complex128)");
  }
}

const char *op_name(const c10d::ReduceOp &op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "an unknown op";
  }
}

// strata's op for a reduction of `type`; PREMUL_SUM is a SUM once its factor is applied.
strata_op op_of(const c10d::ReduceOp &op, at::ScalarType type) {
  Wire wire = wire_of(type);
  bool floating = at::isFloatingType(type) || wire.is_complex;
  if (wire.is_complex)
    TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG ||
                    op.op_ == c10d::ReduceOp::PREMUL_SUM,
                "strata: ", op_name(op),
                " is not defined on complex tensors (SUM, AVG, "
                "PREMUL_SUM are)");
  if (wire.is_bool) {
    switch (op.op_) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR:
        return STRATA_MAX;  // or
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND:
        return STRATA_MIN;  // and
      case c10d::ReduceOp::BXOR:
        return STRATA_BXOR;
      default:
        TORCH_CHECK(false, "strata: ", op_name(op), " is not defined on bool tensors");
    }
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return STRATA_SUM;
    case c10d::ReduceOp::AVG:
      return STRATA_AVG;
    case c10d::ReduceOp::PRODUCT:
      return STRATA_PROD;
    case c10d::ReduceOp::MIN:
      return STRATA_MIN;
    case c10d::ReduceOp::MAX:
      return STRATA_MAX;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(!floating, "strata: ", op_name(op),
                  " is defined on integer and bool tensors, not ", type);
      return op.op_ == c10d::ReduceOp::BAND  ? STRATA_BAND
             : op.op_ == c10d::ReduceOp::BOR ? STRATA_BOR
                                             : STRATA_BXOR;
    default:
      TORCH_CHECK(false, "strata: reduce op ", op_name(op), " is not supported");
  }
}

// PREMUL_SUM's factor, as a double (a one-element tensor factor is read once).
double premul_factor(const c10d::ReduceOp &op) {
  auto *supplement = dynamic_cast<c10d::PreMulSumSupplement *>(op.supplement_.get());
  TORCH_CHECK(supplement, "strata: PREMUL_SUM without its factor");
  if (supplement->tensor_factor.defined()) {
    TORCH_CHECK(!supplement->tensor_factor.is_complex(), "strata: PREMUL_SUM takes a real factor");
    return supplement->tensor_factor.to(at::kCPU).item<double>();
  }
  return supplement->double_factor;
}

void check_tensor(const at::Tensor &tensor, const char *what) {
  TORCH_CHECK(tensor.defined(), "strata: ", what, ": an undefined tensor");
  TORCH_CHECK(tensor.layout() == at::kStrided, "strata: ", what, ": a ", tensor.layout(),
              " tensor; the strata backend moves dense (strided) tensors only");
  TORCH_CHECK(tensor.is_contiguous(), "strata: ", what,
              ": the tensor is not contiguous (call .contiguous() first)");
  wire_of(tensor.scalar_type());
}

const at::Tensor &single(const std::vector<at::Tensor> &tensors, const char *what) {
  TORCH_CHECK(tensors.size() == 1, "strata: ", what, " takes one tensor per rank, not ",
              tensors.size());
  check_tensor(tensors[0], what);
  return tensors[0];
}

// Every tensor of `list` like `like` (same dtype and element count), as the list forms need.
void check_list(const std::vector<at::Tensor> &list, size_t expected, const at::Tensor &like,
                const char *what) {
  TORCH_CHECK(list.size() == expected, "strata: ", what, ": a list of ", expected,
              " tensors (one per rank) expected, not ", list.size());
  for (const at::Tensor &tensor : list) {
    check_tensor(tensor, what);
    TORCH_CHECK(tensor.scalar_type() == like.scalar_type() && tensor.numel() == like.numel(),
                "strata: ", what, ": every tensor of the list must have the dtype (",
                like.scalar_type(), ") and element count (", like.numel(),
                ") of the single tensor");
  }
}

void check_same_dtype(const at::Tensor &a, const at::Tensor &b, const char *what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "strata: ", what,
              ": input and output dtypes differ (", a.scalar_type(), " and ", b.scalar_type(), ")");
}

// One host tensor holding `list` end to end (on the CPU, whatever their device).
at::Tensor flat_copy(const std::vector<at::Tensor> &list) {
  std::vector<at::Tensor> flattened;
  flattened.reserve(list.size());
  for (const at::Tensor &tensor : list) flattened.push_back(tensor.reshape({-1}).to(at::kCPU));
  return at::cat(flattened);
}

void copy_out(const at::Tensor &flat, const std::vector<at::Tensor> &list) {
  int64_t offset = 0;
  for (const at::Tensor &tensor : list) {
    int64_t n = tensor.numel();
    c10::OptionalDeviceGuard guard(tensor.device());
    tensor.copy_(flat.narrow(0, offset, n).view(tensor.sizes()));
    offset += n;
  }
}

// One strata call over raw buffers (the backend's own small exchanges go uncompressed).
strata_coll_args raw_args(strata_coll coll, const void *send, void *recv, size_t count,
                          strata_dtype dtype, strata_compress compress) {
  strata_coll_args args;
  std::memset(&args, 0, sizeof args);
  args.coll = coll;
  args.sendbuf = send;
  args.recvbuf = recv;
  args.count = count;
  args.dtype = dtype;
  args.op = STRATA_SUM;
  args.algo = STRATA_ALGO_AUTO;
  args.compress = compress;
  return args;
}

// One strata call over tensors' memory, in their wire type, with the communicator's compression.
strata_coll_args make_args(strata_coll coll, const at::Tensor *send, const at::Tensor *recv,
                           int64_t numel, at::ScalarType type) {
  Wire wire = wire_of(type);
  return raw_args(coll, send ? send->data_ptr() : nullptr, recv ? recv->data_ptr() : nullptr,
                  static_cast<size_t>(numel * wire.per_element), wire.dtype,
                  STRATA_COMPRESS_DEFAULT);
}

// ---- the caller's c10d::Store as a strata_store_ops ----

int store_set(void *context, const char *key, const void *value, size_t len) {
  try {
    const uint8_t *bytes = static_cast<const uint8_t *>(value);
    static_cast<c10d::Store *>(context)->set(key, std::vector<uint8_t>(bytes, bytes + len));
    return STRATA_OK;
  } catch (const std::exception &) {
    return STRATA_ERR_SYSTEM;
  }
}

int store_get(void *context, const char *key, void **value, size_t *len, double timeout_s) {
  auto *store = static_cast<c10d::Store *>(context);
  // c10d takes a zero timeout as "forever"; strata's never is.
  auto timeout = std::chrono::milliseconds(std::max<int64_t>(1, (int64_t)(timeout_s * 1000.0)));
  try {
    store->wait({key}, timeout);
  } catch (const std::exception &) {
    return STRATA_ERR_TIMEOUT;
  }
  try {
    std::vector<uint8_t> bytes = store->get(key);
    void *copy = std::malloc(bytes.empty() ? 1 : bytes.size());
    if (!copy) return STRATA_ERR_NO_MEMORY;
    if (!bytes.empty()) std::memcpy(copy, bytes.data(), bytes.size());
    *value = copy;
    *len = bytes.size();
    return STRATA_OK;
  } catch (const std::exception &) {
    return STRATA_ERR_SYSTEM;
  }
}

int store_add(void *context, const char *key, int64_t delta, int64_t *result) {
  try {
    *result = static_cast<c10d::Store *>(context)->add(key, delta);
    return STRATA_OK;
  } catch (const std::exception &) {
    return STRATA_ERR_SYSTEM;
  }
}

// c10d's compareSet with an empty expected value sets a missing key; it returns the value the
// key holds afterwards, which is ours when we set it (or when another writer's equals ours, which
// the caller cannot tell apart and need not: the value is the same).
int store_set_if_absent(void *context, const char *key, const void *value, size_t len,
                        int *was_set) {
  try {
    const uint8_t *p = static_cast<const uint8_t *>(value);
    std::vector<uint8_t> desired(p, p + len);
    std::vector<uint8_t> now =
        static_cast<c10d::Store *>(context)->compareSet(key, std::vector<uint8_t>(), desired);
    *was_set = now == desired;
    return STRATA_OK;
  } catch (const std::exception &) {
    return STRATA_ERR_SYSTEM;
  }
}

// ---- Work ----

// The completion thread's queue and what wakes it: a new plan, the end of the group, or a
// caller that starts waiting for a Work.
struct Signal {
  std::mutex mutex;
  std::condition_variable cv;
};

class StrataWork : public c10d::Work {
 public:
  StrataWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
             std::shared_ptr<Signal> signal)
      : c10d::Work(rank, type),
        signal_(std::move(signal)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }

  // A caller waits: the completion thread stops polling this plan's requests and blocks in
  // strata_request_wait, the lowest latency, as no one on this thread will start another call.
  bool wait(std::chrono::milliseconds timeout) override {
    if (!isCompleted()) {
      {
        std::lock_guard<std::mutex> lock(signal_->mutex);
        waited_ = true;
      }
      signal_->cv.notify_all();
    }
    return c10d::Work::wait(timeout);
  }

  bool waited() const { return waited_; }  // under signal_->mutex
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // A receive's sender: the rank asked for, or for one from any source the rank strata names
  // when it completes (read once the Work is waited for, as torch does).
  int sourceRank() const override { return source_ ? *source_ : source_rank_; }
  void set_source_rank(int rank) { source_rank_ = rank; }
  void set_source(std::shared_ptr<int> source) { source_ = std::move(source); }

  // The completion thread's last word on this operation.
  void complete(std::exception_ptr error) {
    finish(error);
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  std::shared_ptr<Signal> signal_;
  bool waited_ = false;
  int source_rank_ = -1;
  std::shared_ptr<int> source_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Whether torch asked for this call with async_op=False (its options carry asyncOp from torch
// 2.7; older ones leave every call asynchronous).
template <typename T, typename = void>
struct has_async_op : std::false_type {};
template <typename T>
struct has_async_op<T, std::void_t<decltype(std::declval<T>().asyncOp)>> : std::true_type {};
template <typename T>
bool synchronous(const T &opts) {
  if constexpr (has_async_op<T>::value)
    return !opts.asyncOp;
  else
    return false;
}

// One operation: the strata calls it makes, in order, and what must follow them.
struct Plan {
  const char *what;
  c10d::OpType type;
  std::vector<strata_coll_args> calls;
  std::vector<at::Tensor> outputs;           // Work::result()
  std::vector<at::Tensor> keep;              // every buffer strata owns until the requests complete
  std::vector<std::function<void()>> after;  // in order, once every request succeeded
  bool synchronous = false;  // async_op=False: the caller waits at once (see run_inline)
  // A receive from any source (a call with root STRATA_ANY_SOURCE): where strata writes the
  // sender's rank, which the Work reports.
  std::shared_ptr<int> source;

  Plan(const char *what_, c10d::OpType type_) : what(what_), type(type_) {}
};

struct Pending {
  c10::intrusive_ptr<StrataWork> work;
  std::vector<strata_request *> requests;
  int start_status = STRATA_OK;  // a call that could not start: the ones before it still run
  Plan plan;
};

// A host tensor strata may read and write for `tensor`: the tensor itself on the CPU, else a
// host copy (pinned where the device supports it), filled from the device when `copy_in`.
at::Tensor host_of(const at::Tensor &tensor, bool copy_in) {
  if (tensor.is_cpu()) return tensor;
  at::Tensor host;
  try {
    host = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  } catch (const std::exception &) {
    host = at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
  }
  if (copy_in) {
    c10::OptionalDeviceGuard guard(tensor.device());
    host.copy_(tensor);  // waits for the work queued on the device's current stream
  }
  return host;
}

// ---- the backend ----

// Every strata group of this process, for stats(): the live ones are read when asked, the ended
// ones kept as totals, so a process's figures do not drop when a group is destroyed.
struct GroupTotals {
  std::mutex mutex;
  std::set<strata_comm *> live;
  strata_comm_stats ended{};
};

GroupTotals &group_totals() {
  static GroupTotals *totals = new GroupTotals;  // never destroyed: backends may outlive main()
  return *totals;
}

void add_stats(strata_comm_stats &sum, const strata_comm_stats &more) {
  sum.messages_sent += more.messages_sent;
  sum.data_bytes_sent += more.data_bytes_sent;
  sum.wire_bytes_sent += more.wire_bytes_sent;
  sum.wan_bytes_sent += more.wan_bytes_sent;
}

pybind11::dict process_stats() {
  strata_comm_stats sum{};
  size_t live = 0;
  {
    GroupTotals &totals = group_totals();
    std::lock_guard<std::mutex> lock(totals.mutex);
    live = totals.live.size();
    sum = totals.ended;
    for (strata_comm *comm : totals.live) {
      strata_comm_stats one{};
      if (strata_comm_get_stats(comm, &one) == STRATA_OK) add_stats(sum, one);
    }
  }
  pybind11::dict out;
  out["messages_sent"] = sum.messages_sent;
  out["data_bytes_sent"] = sum.data_bytes_sent;
  out["wire_bytes_sent"] = sum.wire_bytes_sent;
  out["wan_bytes_sent"] = sum.wan_bytes_sent;
  out["groups"] = live;
  return out;
}

class BackendStrata : public c10d::Backend {
 public:
  BackendStrata(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size), store_(store), timeout_(timeout) {
    strata_config cfg;
    strata_config_init(&cfg);
    char err[512] = "";
    int status = strata_config_from_env(&cfg, err, sizeof err);
    TORCH_CHECK(status == STRATA_OK, "strata: the environment: ", err);
    // The group's rank first: under torchrun the environment holds the world's, and a rank
    // below the group's size is also below the world's.
    set(&cfg, "rank", std::to_string(rank));
    set(&cfg, "world_size", std::to_string(size));
    // torch's timeout is how long a collective may wait for a late rank (a checkpoint, an
    // evaluation): strata's operation timeout. A dead or frozen rank is found sooner, by its
    // silence (STRATA_TIMEOUT).
    if (!std::getenv("STRATA_OP_TIMEOUT") && timeout.count() > 0) {
      char text[64];
      std::snprintf(text, sizeof text, "%.3f", timeout.count() / 1000.0);
      set(&cfg, "op_timeout", text);
    }
    set(&cfg, "job_id", group_job_id(cfg.job_id, rank));
    ops_.context = store_.get();
    ops_.set = store_set;
    ops_.get = store_get;
    ops_.add = store_add;
    ops_.set_if_absent = store_set_if_absent;
    status = strata_comm_init_store(&cfg, &ops_, &comm_);
    TORCH_CHECK(status == STRATA_OK, failure_text("joining the group", status));
    {
      GroupTotals &totals = group_totals();
      std::lock_guard<std::mutex> lock(totals.mutex);
      totals.live.insert(comm_);
    }
    thread_ = std::thread([this] { complete_in_order(); });
  }

  ~BackendStrata() override {
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      stopping_ = true;
    }
    signal_->cv.notify_all();
    thread_.join();
    {
      GroupTotals &totals = group_totals();
      std::lock_guard<std::mutex> lock(totals.mutex);
      strata_comm_stats last{};
      if (strata_comm_get_stats(comm_, &last) == STRATA_OK) add_stats(totals.ended, last);
      totals.live.erase(comm_);
    }
    strata_comm_destroy(comm_);
  }

  const std::string getBackendName() const override { return "strata"; }
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("strata", timeout_);
  }

  // split_group: the ranks of `ranks` (this group's) make a group of their own through `store`.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store,
                                          const std::vector<int> &ranks,
                                          const c10::intrusive_ptr<Options> &opts) override {
    auto mine = std::find(ranks.begin(), ranks.end(), getRank());
    if (mine == ranks.end()) return nullptr;
    auto timeout = opts ? opts->timeout : timeout_;
    return c10::make_intrusive<BackendStrata>(store, static_cast<int>(mine - ranks.begin()),
                                              static_cast<int>(ranks.size()), timeout);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override {
    const at::Tensor &t = single(tensors, "allreduce");
    Plan plan("allreduce", c10d::OpType::ALLREDUCE);
    plan.synchronous = synchronous(opts);
    plan.outputs = {t};
    add_allreduce(plan, t, opts.reduceOp);
    return start(std::move(plan));
  }

  // One strata allreduce over the tensors end to end (they share a dtype, as torch requires).
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override {
    TORCH_CHECK(!tensors.empty(), "strata: allreduce_coalesced: no tensors");
    for (const at::Tensor &t : tensors) {
      check_tensor(t, "allreduce_coalesced");
      check_same_dtype(tensors[0], t, "allreduce_coalesced");
    }
    Plan plan("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED);
    plan.synchronous = synchronous(opts);
    plan.outputs = tensors;
    at::Tensor flat = flat_copy(tensors);
    add_allreduce(plan, flat, opts.reduceOp);
    std::vector<at::Tensor> list = tensors;
    plan.after.push_back([flat, list] { copy_out(flat, list); });
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override {
    const at::Tensor &t = single(tensors, "broadcast");
    TORCH_CHECK(opts.rootTensor == 0, "strata: broadcast: one tensor per rank (rootTensor 0)");
    Plan plan("broadcast", c10d::OpType::BROADCAST);
    plan.synchronous = synchronous(opts);
    plan.outputs = {t};
    at::Tensor host = inout(plan, t, true);
    strata_coll_args args =
        make_args(STRATA_COLL_BROADCAST, &host, &host, t.numel(), t.scalar_type());
    args.root = root(opts.rootRank, "broadcast");
    plan.calls.push_back(args);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override {
    const at::Tensor &t = single(tensors, "reduce");
    TORCH_CHECK(opts.rootTensor == 0, "strata: reduce: one tensor per rank (rootTensor 0)");
    strata_op op = op_of(opts.reduceOp, t.scalar_type());
    Plan plan("reduce", c10d::OpType::REDUCE);
    plan.synchronous = synchronous(opts);
    plan.outputs = {t};
    at::Tensor host = inout(plan, t, true);
    premultiply(host, opts.reduceOp);
    strata_coll_args args = make_args(STRATA_COLL_REDUCE, &host, &host, t.numel(), t.scalar_type());
    args.op = op;
    args.root = root(opts.rootRank, "reduce");
    plan.calls.push_back(args);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override {
    const at::Tensor &in = single(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "strata: allgather: one output list per rank");
    Plan plan("allgather", c10d::OpType::ALLGATHER);
    plan.synchronous = synchronous(opts);
    add_allgather_list(plan, outputs[0], in);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "strata: allgather_coalesced: ", inputs.size(),
                " inputs and ", outputs.size(), " output lists");
    Plan plan("allgather_coalesced", c10d::OpType::ALLGATHER_COALESCED);
    plan.synchronous = synchronous(opts);
    for (size_t i = 0; i < inputs.size(); i++) {
      check_tensor(inputs[i], "allgather_coalesced");
      add_allgather_list(plan, outputs[i], inputs[i]);
    }
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override {
    Plan plan("allgather", c10d::OpType::_ALLGATHER_BASE);
    plan.synchronous = synchronous(opts);
    add_allgather_flat(plan, output, input, "allgather_into_tensor");
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "strata: allgather_into_tensor_coalesced: ", inputs.size(), " inputs and ",
                outputs.size(), " outputs");
    Plan plan("allgather_into_tensor_coalesced", c10d::OpType::COALESCED);
    plan.synchronous = synchronous(opts);
    for (size_t i = 0; i < inputs.size(); i++)
      add_allgather_flat(plan, outputs[i], inputs[i], "allgather_into_tensor_coalesced");
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override {
    const at::Tensor &out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1, "strata: reduce_scatter: one input list per rank");
    check_list(inputs[0], size_, out, "reduce_scatter");
    Plan plan("reduce_scatter", c10d::OpType::REDUCE_SCATTER);
    plan.synchronous = synchronous(opts);
    at::Tensor flat = flat_copy(inputs[0]);
    add_reduce_scatter(plan, out, flat, opts.reduceOp, true);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override {
    Plan plan("reduce_scatter", c10d::OpType::_REDUCE_SCATTER_BASE);
    plan.synchronous = synchronous(opts);
    check_flat_pair(output, input, "reduce_scatter_tensor");
    add_reduce_scatter(plan, output, input, opts.reduceOp, false);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::ReduceScatterOptions &opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(),
                "strata: reduce_scatter_tensor_coalesced: ", inputs.size(), " inputs and ",
                outputs.size(), " outputs");
    Plan plan("reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED);
    plan.synchronous = synchronous(opts);
    for (size_t i = 0; i < inputs.size(); i++) {
      check_flat_pair(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
      add_reduce_scatter(plan, outputs[i], inputs[i], opts.reduceOp, false);
    }
    return start(std::move(plan));
  }

  // Even splits go straight to strata's all-to-all; uneven ones pad every block to the largest
  // block any rank sends (agreed by one allreduce of one integer) and unpack afterwards.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_splits,
                                               std::vector<int64_t> &input_splits,
                                               const c10d::AllToAllOptions &opts) override {
    check_tensor(input, "alltoall_base");
    check_tensor(output, "alltoall_base");
    check_same_dtype(input, output, "alltoall_base");
    int64_t in_rows = input.dim() ? input.size(0) : 0, out_rows = output.dim() ? output.size(0) : 0;
    int64_t in_row = in_rows ? input.numel() / in_rows : 0;
    int64_t out_row = out_rows ? output.numel() / out_rows : 0;
    std::vector<int64_t> sends = splits_or_even(input_splits, in_rows, "input_split_sizes");
    std::vector<int64_t> recvs = splits_or_even(output_splits, out_rows, "output_split_sizes");
    std::vector<at::Tensor> send_blocks, recv_blocks;
    int64_t offset = 0;
    for (int64_t rows : sends) {
      send_blocks.push_back(input.reshape({-1}).narrow(0, offset * in_row, rows * in_row));
      offset += rows;
    }
    offset = 0;
    for (int64_t rows : recvs) {
      recv_blocks.push_back(output.reshape({-1}).narrow(0, offset * out_row, rows * out_row));
      offset += rows;
    }
    Plan plan("alltoall_base", c10d::OpType::ALLTOALL_BASE);
    plan.synchronous = synchronous(opts);
    plan.outputs = {output};
    plan.keep = {input};
    add_alltoall_blocks(plan, send_blocks, recv_blocks, input.scalar_type());
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override {
    TORCH_CHECK(
        inputs.size() == static_cast<size_t>(size_) && outputs.size() == static_cast<size_t>(size_),
        "strata: alltoall: one input and one output tensor per rank (", size_, ")");
    for (size_t i = 0; i < inputs.size(); i++) {
      check_tensor(inputs[i], "alltoall");
      check_tensor(outputs[i], "alltoall");
      check_same_dtype(inputs[0], inputs[i], "alltoall");
      check_same_dtype(inputs[0], outputs[i], "alltoall");
    }
    Plan plan("alltoall", c10d::OpType::ALLTOALL);
    plan.synchronous = synchronous(opts);
    plan.outputs = outputs;
    add_alltoall_blocks(plan, inputs, outputs, inputs[0].scalar_type());
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override {
    const at::Tensor &in = single(inputs, "gather");
    int root_rank = root(opts.rootRank, "gather");
    Plan plan("gather", c10d::OpType::GATHER);
    plan.synchronous = synchronous(opts);
    at::Tensor host_in = host_of(in, true);
    plan.keep.push_back(host_in);
    strata_coll_args args =
        make_args(STRATA_COLL_GATHER, &host_in, nullptr, in.numel(), in.scalar_type());
    args.root = root_rank;
    if (getRank() != root_rank) {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "strata: gather: only the root gives output tensors");
      plan.calls.push_back(args);
      return start(std::move(plan));
    }
    TORCH_CHECK(outputs.size() == 1, "strata: gather: one output list on the root");
    std::vector<at::Tensor> list = outputs[0];
    check_list(list, size_, in, "gather");
    at::Tensor flat = at::empty({size_ * in.numel()}, in.options().device(at::kCPU));
    args.recvbuf = flat.data_ptr();
    plan.calls.push_back(args);
    plan.outputs = list;
    plan.keep.push_back(flat);
    plan.after.push_back([flat, list] { copy_out(flat, list); });
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override {
    const at::Tensor &out = single(outputs, "scatter");
    int root_rank = root(opts.rootRank, "scatter");
    Plan plan("scatter", c10d::OpType::SCATTER);
    plan.synchronous = synchronous(opts);
    plan.outputs = {out};
    at::Tensor host_out = inout(plan, out, false);
    strata_coll_args args =
        make_args(STRATA_COLL_SCATTER, nullptr, &host_out, out.numel(), out.scalar_type());
    args.root = root_rank;
    if (getRank() != root_rank) {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "strata: scatter: only the root gives input tensors");
    } else {
      TORCH_CHECK(inputs.size() == 1, "strata: scatter: one input list on the root");
      check_list(inputs[0], size_, out, "scatter");
      at::Tensor flat = flat_copy(inputs[0]);
      args.sendbuf = flat.data_ptr();
      plan.keep.push_back(flat);
    }
    plan.calls.push_back(args);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override {
    Plan plan("barrier", c10d::OpType::BARRIER);
    plan.synchronous = synchronous(opts);
    plan.calls.push_back(make_args(STRATA_COLL_BARRIER, nullptr, nullptr, 0, at::kByte));
    return start(std::move(plan));
  }

  // Every rank but 0 reports to rank 0, which waits up to the timeout and names the ranks that
  // did not report (all of them with wait_all_ranks, else the first); rank 0 then tells each
  // rank that reported whether the barrier passed, so a failure raises on every rank that came.
  void monitoredBarrier(const c10d::BarrierOptions &opts, bool wait_all_ranks) override {
    auto timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
    if (getRank() != 0) {
      uint8_t here = 1, verdict = 0;
      p2p_blocking(STRATA_COLL_SEND, &here, 0, "monitored_barrier");
      p2p_blocking(STRATA_COLL_RECV, &verdict, 0, "monitored_barrier");
      TORCH_CHECK(verdict == 1, "strata: monitored_barrier: rank 0 found ranks missing");
      return;
    }
    std::vector<uint8_t> flags(size_, 0);
    std::vector<strata_request *> requests(size_, nullptr);
    for (int peer = 1; peer < size_; peer++) {
      strata_coll_args args = p2p_args(STRATA_COLL_RECV, &flags[peer], peer);
      int status = strata_collective(comm_, &args, &requests[peer]);
      TORCH_CHECK(status == STRATA_OK, failure_text("monitored_barrier", status));
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<int> missing;
    for (int peer = 1; peer < size_; peer++) {
      int status = STRATA_ERR_IN_PROGRESS;
      while ((status = strata_request_test(requests[peer])) == STRATA_ERR_IN_PROGRESS &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (status != STRATA_OK) {
        missing.push_back(peer);
        if (!wait_all_ranks) break;
      }
    }
    uint8_t verdict = missing.empty() ? 1 : 0;
    for (int peer = 1; peer < size_; peer++)
      if (std::find(missing.begin(), missing.end(), peer) == missing.end() && flags[peer] == 1)
        p2p_blocking(STRATA_COLL_SEND, &verdict, peer, "monitored_barrier");
    if (missing.empty()) return;
    std::string names;
    for (int peer : missing) names += (names.empty() ? "" : ", ") + std::to_string(peer);
    TORCH_CHECK(false, "strata: monitored_barrier: rank", missing.size() > 1 ? "s " : " ", names,
                " did not reach the barrier within ", timeout.count(), " ms");
  }

  // Tags are not matched: messages between a pair arrive in the order they were sent, and a
  // receive from any source takes the first message no earlier receive takes (strata.h,
  // strata_irecv_any: MPI's non-overtaking order).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst_rank,
                                      int) override {
    const at::Tensor &t = single(tensors, "send");
    Plan plan("send", c10d::OpType::SEND);
    at::Tensor host = host_of(t, true);
    plan.keep.push_back(host);
    strata_coll_args args = make_args(STRATA_COLL_SEND, &host, nullptr, t.numel(), t.scalar_type());
    args.root = root(dst_rank, "send");
    plan.calls.push_back(args);
    return start(std::move(plan));
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src_rank,
                                      int) override {
    const at::Tensor &t = single(tensors, "recv");
    Plan plan("recv", c10d::OpType::RECV);
    plan.outputs = {t};
    at::Tensor host = inout(plan, t, false);
    strata_coll_args args = make_args(STRATA_COLL_RECV, nullptr, &host, t.numel(), t.scalar_type());
    args.root = root(src_rank, "recv");
    plan.calls.push_back(args);
    auto work = start(std::move(plan));
    static_cast<StrataWork *>(work.get())->set_source_rank(src_rank);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int) override {
    const at::Tensor &t = single(tensors, "recv");
    Plan plan("recv", c10d::OpType::RECVANYSOURCE);
    plan.outputs = {t};
    at::Tensor host = inout(plan, t, false);
    strata_coll_args args = make_args(STRATA_COLL_RECV, nullptr, &host, t.numel(), t.scalar_type());
    args.root = STRATA_ANY_SOURCE;
    plan.calls.push_back(args);
    plan.source = std::make_shared<int>(STRATA_ANY_SOURCE);
    return start(std::move(plan));
  }

 private:
  static void set(strata_config *cfg, const char *name, const std::string &value) {
    char err[512] = "";
    int status = strata_config_set(cfg, name, value.c_str(), err, sizeof err);
    TORCH_CHECK(status == STRATA_OK, "strata: setting ", name, ": ", err);
  }

  // Every communicator of a process needs its own job id (shared-memory segments are named by
  // it); the group's rank 0 draws one and hands it to the others through the group's store.
  std::string group_job_id(const char *base, int rank) {
    const std::string key = "strata_job_id";
    if (rank == 0) {
      std::random_device device;
      uint64_t nonce = (static_cast<uint64_t>(device()) << 32) ^ device();
      char id[64];
      std::snprintf(id, sizeof id, "%.40s-%016" PRIx64, base, nonce);
      std::string text(id);
      store_->set(key, std::vector<uint8_t>(text.begin(), text.end()));
      return text;
    }
    std::vector<uint8_t> bytes = store_->get(key);  // waits up to the store's timeout
    return std::string(bytes.begin(), bytes.end());
  }

  int root(int64_t rank, const char *what) const {
    TORCH_CHECK(rank >= 0 && rank < size_, "strata: ", what, ": rank ", rank,
                " is outside the group of ", size_);
    return static_cast<int>(rank);
  }

  // The host buffer for a tensor strata writes (and reads, with copy_in): a device tensor's
  // result goes back to it before the Work completes.
  static at::Tensor inout(Plan &plan, const at::Tensor &tensor, bool copy_in) {
    at::Tensor host = host_of(tensor, copy_in);
    plan.keep.push_back(host);
    if (!host.is_same(tensor))
      plan.after.push_back([host, tensor] {
        c10::OptionalDeviceGuard guard(tensor.device());
        tensor.copy_(host);
      });
    return host;
  }

  static void premultiply(at::Tensor &host, const c10d::ReduceOp &op) {
    if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
    at::NoGradGuard no_grad;
    double factor = premul_factor(op);
    if (at::isFloatingType(host.scalar_type()) || at::isComplexType(host.scalar_type()))
      host.mul_(factor);
    else  // integers: the product rounded to the nearest integer of the tensor's type
      host.copy_(at::round(host.to(at::kDouble).mul_(factor)));
  }

  void add_allreduce(Plan &plan, const at::Tensor &t, const c10d::ReduceOp &reduce_op) {
    strata_op op = op_of(reduce_op, t.scalar_type());
    at::Tensor host = inout(plan, t, true);
    premultiply(host, reduce_op);
    strata_coll_args args =
        make_args(STRATA_COLL_ALLREDUCE, &host, &host, t.numel(), t.scalar_type());
    args.op = op;
    plan.calls.push_back(args);
  }

  void add_allgather_list(Plan &plan, std::vector<at::Tensor> &list, const at::Tensor &in) {
    check_list(list, size_, in, "allgather");
    at::Tensor host_in = host_of(in, true);
    at::Tensor flat = at::empty({size_ * in.numel()}, in.options().device(at::kCPU));
    plan.calls.push_back(
        make_args(STRATA_COLL_ALLGATHER, &host_in, &flat, in.numel(), in.scalar_type()));
    plan.keep.push_back(host_in);
    plan.keep.push_back(flat);
    plan.outputs.insert(plan.outputs.end(), list.begin(), list.end());
    std::vector<at::Tensor> outputs = list;
    plan.after.push_back([flat, outputs] { copy_out(flat, outputs); });
  }

  void add_allgather_flat(Plan &plan, at::Tensor &output, at::Tensor &input, const char *what) {
    check_tensor(input, what);
    check_tensor(output, what);
    check_same_dtype(input, output, what);
    TORCH_CHECK(output.numel() == size_ * input.numel(), "strata: ", what, ": the output has ",
                output.numel(), " elements, not world size x input (", size_ * input.numel(), ")");
    at::Tensor host_in = host_of(input, true);
    plan.keep.push_back(host_in);
    plan.outputs.push_back(output);
    at::Tensor host_out = inout(plan, output, false);
    plan.calls.push_back(
        make_args(STRATA_COLL_ALLGATHER, &host_in, &host_out, input.numel(), input.scalar_type()));
  }

  void check_flat_pair(const at::Tensor &output, const at::Tensor &input, const char *what) {
    check_tensor(input, what);
    check_tensor(output, what);
    check_same_dtype(input, output, what);
    TORCH_CHECK(input.numel() == size_ * output.numel(), "strata: ", what, ": the input has ",
                input.numel(), " elements, not world size x output (", size_ * output.numel(), ")");
  }

  // `input` is ours to change when `owned` (a flat copy), else the caller's: PREMUL_SUM then
  // scales a copy.
  void add_reduce_scatter(Plan &plan, const at::Tensor &output, const at::Tensor &input,
                          const c10d::ReduceOp &reduce_op, bool owned) {
    strata_op op = op_of(reduce_op, output.scalar_type());
    at::Tensor host_in = host_of(input, true);
    if (reduce_op.op_ == c10d::ReduceOp::PREMUL_SUM) {
      if (!owned && host_in.is_same(input)) host_in = host_in.clone();
      premultiply(host_in, reduce_op);
    }
    plan.keep.push_back(host_in);
    plan.outputs.push_back(output);
    at::Tensor host_out = inout(plan, output, false);
    strata_coll_args args = make_args(STRATA_COLL_REDUCE_SCATTER, &host_in, &host_out,
                                      output.numel(), output.scalar_type());
    args.op = op;
    plan.calls.push_back(args);
  }

  std::vector<int64_t> splits_or_even(const std::vector<int64_t> &splits, int64_t rows,
                                      const char *what) const {
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "strata: alltoall_base: dim 0 (", rows,
                  ") does not split evenly across ", size_, " ranks; give ", what);
      return std::vector<int64_t>(size_, rows / size_);
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(size_), "strata: alltoall_base: ", what,
                " has ", splits.size(), " entries, not one per rank (", size_, ")");
    int64_t total = 0;
    for (int64_t split : splits) {
      TORCH_CHECK(split >= 0, "strata: alltoall_base: a negative size in ", what);
      total += split;
    }
    TORCH_CHECK(total == rows, "strata: alltoall_base: ", what, " adds up to ", total,
                " rows, the tensor has ", rows);
    return splits;
  }

  // Block j of `sends` goes to rank j, block i of `recvs` comes from rank i. Blocks of one
  // size go as they are; otherwise every block is padded to the largest any rank has.
  void add_alltoall_blocks(Plan &plan, const std::vector<at::Tensor> &sends,
                           const std::vector<at::Tensor> &recvs, at::ScalarType type) {
    int64_t largest = 0;
    bool even = true;
    for (const at::Tensor &b : sends) {
      largest = std::max(largest, b.numel());
      even = even && b.numel() == sends[0].numel();
    }
    for (const at::Tensor &b : recvs) even = even && b.numel() == sends[0].numel();
    // every rank must take the same path: agree on the largest block and on evenness
    int64_t agreed[2] = {largest, even ? 0 : 1};
    strata_coll_args probe =
        raw_args(STRATA_COLL_ALLREDUCE, agreed, agreed, 2, STRATA_I64, STRATA_COMPRESS_NONE);
    probe.op = STRATA_MAX;
    run_blocking(probe, "alltoall (agreeing on block sizes)");
    int64_t block = agreed[0];
    at::TensorOptions host_options = at::TensorOptions().dtype(type).device(at::kCPU);
    at::Tensor send = at::zeros({size_ * block}, host_options);
    at::Tensor recv = at::empty({size_ * block}, host_options);
    for (int j = 0; j < size_; j++)
      send.narrow(0, j * block, sends[j].numel()).copy_(sends[j].reshape({-1}));
    plan.keep.push_back(send);
    plan.keep.push_back(recv);
    plan.calls.push_back(make_args(STRATA_COLL_ALLTOALL, &send, &recv, block, type));
    std::vector<at::Tensor> outputs = recvs;
    plan.after.push_back([recv, outputs, block] {
      for (size_t i = 0; i < outputs.size(); i++) {
        c10::OptionalDeviceGuard guard(outputs[i].device());
        outputs[i].reshape({-1}).copy_(recv.narrow(0, i * block, outputs[i].numel()));
      }
    });
  }

  strata_coll_args p2p_args(strata_coll coll, uint8_t *byte, int peer) {
    strata_coll_args args =
        raw_args(coll, coll == STRATA_COLL_SEND ? byte : nullptr,
                 coll == STRATA_COLL_RECV ? byte : nullptr, 1, STRATA_U8, STRATA_COMPRESS_NONE);
    args.root = peer;
    return args;
  }

  void p2p_blocking(strata_coll coll, uint8_t *byte, int peer, const char *what) {
    run_blocking(p2p_args(coll, byte, peer), what);
  }

  // One call, waited for on the caller's thread; raises its failure.
  void run_blocking(const strata_coll_args &args, const char *what) {
    strata_request *request = nullptr;
    int status = strata_collective(comm_, &args, &request);
    if (status == STRATA_OK) status = strata_request_wait(request);
    TORCH_CHECK(status == STRATA_OK, failure_text(what, status));
  }

  // Starts a plan's calls in order into `requests`; the status of the first that could not
  // start (the ones before it still run and must be waited for).
  int start_calls(const Plan &plan, std::vector<strata_request *> &requests) {
    for (const strata_coll_args &args : plan.calls) {
      strata_request *request = nullptr;
      bool any_source = args.coll == STRATA_COLL_RECV && args.root == STRATA_ANY_SOURCE;
      int status = any_source ? strata_irecv_any(comm_, args.recvbuf, args.count, args.dtype,
                                                 plan.source.get(), &request)
                              : strata_collective(comm_, &args, &request);
      if (status != STRATA_OK) return status;
      requests.push_back(request);
    }
    return STRATA_OK;
  }

  // A plan's last word once its requests are done: their first failure, or what must follow
  // them (copies out of flat and host buffers); then the buffers go and the Work completes.
  static void finish(Plan &plan, int status, StrataWork &work) {
    std::exception_ptr error;
    if (status != STRATA_OK) {
      error = std::make_exception_ptr(std::runtime_error(failure_text(plan.what, status)));
    } else {
      try {
        at::AutoGradMode no_grad(false);  // the copies out are not part of a graph
        for (auto &step : plan.after) step();
      } catch (...) {
        error = std::current_exception();
      }
    }
    plan.keep.clear();
    plan.after.clear();
    work.complete(error);
  }

  c10::intrusive_ptr<c10d::Work> start(Plan plan) {
    if (plan.synchronous) return run_inline(std::move(plan));
    auto work = c10::make_intrusive<StrataWork>(getRank(), plan.type, plan.outputs, signal_);
    work->set_source(plan.source);
    Pending pending{work, {}, STRATA_OK, std::move(plan)};
    pending.start_status = start_calls(pending.plan, pending.requests);
    int start_status = pending.start_status;
    const char *what = pending.plan.what;
    bool queued = !pending.requests.empty();
    if (queued) {
      {
        std::lock_guard<std::mutex> lock(signal_->mutex);
        queue_.push_back(std::move(pending));
      }
      signal_->cv.notify_all();
    }
    TORCH_CHECK(start_status == STRATA_OK, failure_text(what, start_status));
    if (!queued) work->complete(nullptr);  // nothing to move (a plan of no calls)
    return work;
  }

  // A call the caller waits for at once (async_op=False): started, waited for and finished on
  // the caller's thread, as a C program would, with no hand-off to the completion thread and
  // back (each a wake-up: on busy cores, a scheduler slice). The Work returned is complete; its
  // wait() raises the failure, if any.
  c10::intrusive_ptr<c10d::Work> run_inline(Plan plan) {
    auto work = c10::make_intrusive<StrataWork>(getRank(), plan.type, plan.outputs, signal_);
    work->set_source(plan.source);
    std::vector<strata_request *> requests;
    int start_status = start_calls(plan, requests), status = start_status;
    for (strata_request *request : requests) {
      int one = strata_request_wait(request);
      if (status == STRATA_OK) status = one;
    }
    TORCH_CHECK(start_status == STRATA_OK, failure_text(plan.what, start_status));
    finish(plan, status, *work);
    return work;
  }

  // Waits for one request. strata_request_wait holds the communicator's lock until the request
  // completes, so while nobody waits for this Work the caller may be starting the next calls
  // (DDP's buckets, during backward): then the request is polled with strata_request_test,
  // which never blocks a caller, while the communicator's progress thread moves it; the polls
  // back off from yields to sleeps of up to 1 ms, and a caller's wait cuts a sleep short.
  int wait_for_request(const c10::intrusive_ptr<StrataWork> &work, strata_request *request) {
    auto pause = std::chrono::microseconds(0);
    for (int polls = 0;; polls++) {
      {
        std::lock_guard<std::mutex> lock(signal_->mutex);
        if (work->waited()) break;
      }
      int status = strata_request_test(request);
      if (status != STRATA_ERR_IN_PROGRESS) return status;
      if (polls < 16) {
        std::this_thread::yield();
        continue;
      }
      pause = std::min(std::max(pause * 2, std::chrono::microseconds(20)),
                       std::chrono::microseconds(1000));
      std::unique_lock<std::mutex> lock(signal_->mutex);
      signal_->cv.wait_for(lock, pause, [&] { return work->waited(); });
    }
    return strata_request_wait(request);
  }

  // The completion thread: plans in the order they started, until the group is destroyed and
  // nothing is pending.
  void complete_in_order() {
    for (;;) {
      std::unique_ptr<Pending> pending;
      {
        std::unique_lock<std::mutex> lock(signal_->mutex);
        signal_->cv.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        pending = std::make_unique<Pending>(std::move(queue_.front()));
        queue_.pop_front();
      }
      int status = pending->start_status;
      for (strata_request *request : pending->requests) {
        int one = wait_for_request(pending->work, request);
        if (status == STRATA_OK) status = one;
      }
      finish(pending->plan, status, *pending->work);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  strata_store_ops ops_{};
  strata_comm *comm_ = nullptr;
  std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::deque<Pending> queue_;  // under signal_->mutex
  bool stopping_ = false;
  std::thread thread_;
};

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store> &store,
                                                 int rank, int size,
                                                 std::chrono::duration<double> timeout) {
  return c10::make_intrusive<BackendStrata>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

}  // namespace

PYBIND11_MODULE(_torch, module) {
  module.doc() = "The torch.distributed backend \"strata\" (strata.torch registers it).";
  module.def("create_backend", &create_backend, pybind11::arg("store"), pybind11::arg("rank"),
             pybind11::arg("world_size"), pybind11::arg("timeout"),
             pybind11::call_guard<pybind11::gil_scoped_release>(),
             "The c10d Backend of one group: torch.distributed calls it through "
             "Backend.register_backend.");
  module.def("version", [] { return std::string(strata_version()); });
  module.def("stats", &process_stats,
             "What this process's strata groups sent, all together, ended groups included: "
             "messages_sent, data_bytes_sent, wire_bytes_sent, wan_bytes_sent (to ranks of "
             "another site, STRATA_SITE), and groups (the live ones).");
  module.def(
      "_runtime_id", [] { return reinterpret_cast<uintptr_t>(&strata_version); },
      "The address of libstrata's strata_version in this module: equal in strata._strata "
      "and strata._kv when the process has one runtime.");
}
