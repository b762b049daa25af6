// SPDX-License-Identifier: Apache-2.0
/*
 * _torch.cpp — the torch.distributed backend "strata": a c10d::ProcessGroup over strata.h.
 *
 * strata/torch.py registers create_process_group with torch.distributed.Backend. torch (1.13)
 * calls it for the default group and for each new_group with that group's store (a PrefixStore
 * over the job's TCPStore, so MASTER_ADDR/MASTER_PORT are all a job needs), the rank in the
 * group, its size and the timeout. Each group is its own communicator, joined through that store
 * by strata_comm_init_store; its configuration is the environment's STRATA_* knobs, set further
 * by name (strata_config_set), never by writing the struct's fields.
 *
 * Every operation starts one non-blocking strata call on the caller's thread, so calls are
 * numbered in the caller's order, the order every rank must agree on. Its request goes to the
 * group's completion thread, which waits for requests in the order they started, runs what must
 * follow (copying a list form out of its flat buffer), then completes the Work and its Future.
 * That thread exists because DDP's reducer waits on the Future, not on the Work: something other
 * than the caller has to complete it. A Work holds every tensor strata reads or writes until its
 * request completes, since strata owns those buffers until then.
 *
 * The flat forms (allreduce, broadcast, reduce, _allgather_base, _reduce_scatter_base,
 * alltoall_base, send, recv) hand strata the tensors' own memory: no copy. The list forms copy
 * through one flat buffer. Only CPU, strided, contiguous tensors of strata's dtypes are accepted,
 * checked before anything starts; any other tensor, op or option raises a Python exception that
 * names what is not supported. Failures of the call itself raise with the C status name
 * (STRATA_ERR_MISMATCH, ...), on every rank, within the timeout.
 */
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata.h"

namespace {

std::string failure_text(const char *what, int status) {
  return std::string("strata: ") + what + " failed: " + strata_err_name(status) + ": " +
         strata_strerror(status);
}

strata_dtype dtype_of(const at::Tensor &tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return STRATA_F32;
    case at::kDouble:
      return STRATA_F64;
    case at::kHalf:
      return STRATA_F16;
    case at::kBFloat16:
      return STRATA_BF16;
    case at::kChar:
      return STRATA_I8;
    case at::kByte:
      return STRATA_U8;
    case at::kInt:
      return STRATA_I32;
    case at::kLong:
      return STRATA_I64;
    default:
      TORCH_CHECK_TYPE(false, "strata: no strata dtype for ", tensor.scalar_type(),
                       " (float32, float64, float16, bfloat16, int8, uint8, int32, int64)");
  }
}

strata_op op_of(const c10d::ReduceOp &op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return STRATA_SUM;
    case c10d::ReduceOp::AVG:
      return STRATA_AVG;
    case c10d::ReduceOp::PRODUCT:
      return STRATA_PROD;
    case c10d::ReduceOp::MIN:
      return STRATA_MIN;
    case c10d::ReduceOp::MAX:
      return STRATA_MAX;
    default:
      TORCH_CHECK(false, "strata: reduce op ", static_cast<int>(op.op_),
                  " (BAND, BOR, BXOR, PREMUL_SUM) is not supported: sum, avg, product, min, max");
  }
}

void check_tensor(const at::Tensor &tensor, const char *what) {
  TORCH_CHECK(tensor.defined(), "strata: ", what, ": an undefined tensor");
  TORCH_CHECK(tensor.device().is_cpu(), "strata: ", what, ": the tensor is on ", tensor.device(),
              "; the strata backend moves CPU tensors only");
  TORCH_CHECK(tensor.layout() == at::kStrided, "strata: ", what, ": a ", tensor.layout(),
              " tensor; the strata backend moves dense (strided) tensors only");
  TORCH_CHECK(tensor.is_contiguous(), "strata: ", what,
              ": the tensor is not contiguous (call .contiguous() first)");
  dtype_of(tensor);
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

at::Tensor flat_copy(const std::vector<at::Tensor> &list) {
  std::vector<at::Tensor> flattened;
  flattened.reserve(list.size());
  for (const at::Tensor &tensor : list) flattened.push_back(tensor.reshape({-1}));
  return at::cat(flattened);
}

void copy_out(const at::Tensor &flat, const std::vector<at::Tensor> &list) {
  int64_t offset = 0;
  for (const at::Tensor &tensor : list) {
    int64_t n = tensor.numel();
    tensor.copy_(flat.narrow(0, offset, n).view(tensor.sizes()));
    offset += n;
  }
}

strata_coll_args make_args(strata_coll coll, const void *send, void *recv, size_t count,
                           strata_dtype dtype) {
  strata_coll_args args;
  std::memset(&args, 0, sizeof args);
  args.coll = coll;
  args.sendbuf = send;
  args.recvbuf = recv;
  args.count = count;
  args.dtype = dtype;
  args.op = STRATA_SUM;
  args.algo = STRATA_ALGO_AUTO;
  args.compress = STRATA_COMPRESS_DEFAULT;
  return args;
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

// The completion thread's queue and what wakes it: a new request, the end of the group, or a
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

  // A caller waits: the completion thread stops polling this request and blocks in
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
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

struct Pending {
  c10::intrusive_ptr<StrataWork> work;
  strata_request *request;
  const char *what;
  std::vector<at::Tensor> keep;  // every buffer strata owns until the request completes
  std::function<void()> after;   // runs once the request succeeded
};

// ---- the process group ----

class ProcessGroupStrata : public c10d::ProcessGroup {
 public:
  ProcessGroupStrata(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                     double timeout_s)
      : c10d::ProcessGroup(rank, size), store_(store) {
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
    if (!std::getenv("STRATA_OP_TIMEOUT") && timeout_s > 0) {
      char text[64];
      std::snprintf(text, sizeof text, "%.3f", timeout_s);
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
    thread_ = std::thread([this] { complete_in_order(); });
    init();
  }

  ~ProcessGroupStrata() override {
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      stopping_ = true;
    }
    signal_->cv.notify_all();
    thread_.join();
    strata_comm_destroy(comm_);
  }

  const std::string getBackendName() const override { return "strata"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override {
    const at::Tensor &t = single(tensors, "allreduce");
    strata_coll_args args =
        make_args(STRATA_COLL_ALLREDUCE, t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t));
    args.op = op_of(opts.reduceOp);
    return start(c10d::OpType::ALLREDUCE, "allreduce", args, {t}, {}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override {
    const at::Tensor &t = single(tensors, "broadcast");
    TORCH_CHECK(opts.rootTensor == 0, "strata: broadcast: one tensor per rank (rootTensor 0)");
    strata_coll_args args =
        make_args(STRATA_COLL_BROADCAST, t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t));
    args.root = root(opts.rootRank, "broadcast");
    return start(c10d::OpType::BROADCAST, "broadcast", args, {t}, {}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override {
    const at::Tensor &t = single(tensors, "reduce");
    TORCH_CHECK(opts.rootTensor == 0, "strata: reduce: one tensor per rank (rootTensor 0)");
    strata_coll_args args =
        make_args(STRATA_COLL_REDUCE, t.data_ptr(), t.data_ptr(), t.numel(), dtype_of(t));
    args.op = op_of(opts.reduceOp);
    args.root = root(opts.rootRank, "reduce");
    return start(c10d::OpType::REDUCE, "reduce", args, {t}, {}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &) override {
    const at::Tensor &in = single(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "strata: allgather: one output list per rank");
    std::vector<at::Tensor> list = outputs[0];
    check_list(list, size_, in, "allgather");
    at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
    strata_coll_args args =
        make_args(STRATA_COLL_ALLGATHER, in.data_ptr(), flat.data_ptr(), in.numel(), dtype_of(in));
    return start(c10d::OpType::ALLGATHER, "allgather", args, list, {in, flat},
                 [flat, list] { copy_out(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &) override {
    check_tensor(input, "_allgather_base");
    check_tensor(output, "_allgather_base");
    check_same_dtype(input, output, "_allgather_base");
    TORCH_CHECK(output.numel() == size_ * input.numel(), "strata: _allgather_base: the output has ",
                output.numel(), " elements, not world size x input (", size_ * input.numel(), ")");
    strata_coll_args args = make_args(STRATA_COLL_ALLGATHER, input.data_ptr(), output.data_ptr(),
                                      input.numel(), dtype_of(input));
    return start(c10d::OpType::_ALLGATHER_BASE, "allgather", args, {output}, {input}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override {
    const at::Tensor &out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1, "strata: reduce_scatter: one input list per rank");
    check_list(inputs[0], size_, out, "reduce_scatter");
    at::Tensor flat = flat_copy(inputs[0]);
    strata_coll_args args = make_args(STRATA_COLL_REDUCE_SCATTER, flat.data_ptr(), out.data_ptr(),
                                      out.numel(), dtype_of(out));
    args.op = op_of(opts.reduceOp);
    return start(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", args, {out}, {flat}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override {
    check_tensor(input, "_reduce_scatter_base");
    check_tensor(output, "_reduce_scatter_base");
    check_same_dtype(input, output, "_reduce_scatter_base");
    TORCH_CHECK(input.numel() == size_ * output.numel(),
                "strata: _reduce_scatter_base: the input has ", input.numel(),
                " elements, not world size x output (", size_ * output.numel(), ")");
    strata_coll_args args = make_args(STRATA_COLL_REDUCE_SCATTER, input.data_ptr(),
                                      output.data_ptr(), output.numel(), dtype_of(output));
    args.op = op_of(opts.reduceOp);
    return start(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", args, {output}, {input},
                 nullptr);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &output_splits,
                                               std::vector<int64_t> &input_splits,
                                               const c10d::AllToAllOptions &) override {
    check_tensor(input, "alltoall_base");
    check_tensor(output, "alltoall_base");
    check_same_dtype(input, output, "alltoall_base");
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0,
                "strata: alltoall_base: input and output must hold the same number of elements, a "
                "multiple of the world size (",
                input.numel(), " and ", output.numel(), ")");
    check_even_splits(input_splits, input, "input_split_sizes");
    check_even_splits(output_splits, output, "output_split_sizes");
    strata_coll_args args = make_args(STRATA_COLL_ALLTOALL, input.data_ptr(), output.data_ptr(),
                                      input.numel() / size_, dtype_of(input));
    return start(c10d::OpType::ALLTOALL_BASE, "alltoall", args, {output}, {input}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &) override {
    TORCH_CHECK(!inputs.empty(), "strata: alltoall: an empty input list");
    check_tensor(inputs[0], "alltoall");
    check_list(inputs, size_, inputs[0], "alltoall");
    check_list(outputs, size_, inputs[0], "alltoall");
    at::Tensor send = flat_copy(inputs);
    at::Tensor recv = at::empty_like(send);
    strata_coll_args args = make_args(STRATA_COLL_ALLTOALL, send.data_ptr(), recv.data_ptr(),
                                      inputs[0].numel(), dtype_of(send));
    return start(c10d::OpType::ALLTOALL, "alltoall", args, outputs, {send, recv},
                 [recv, outputs] { copy_out(recv, outputs); });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override {
    const at::Tensor &in = single(inputs, "gather");
    int root_rank = root(opts.rootRank, "gather");
    strata_coll_args args =
        make_args(STRATA_COLL_GATHER, in.data_ptr(), nullptr, in.numel(), dtype_of(in));
    args.root = root_rank;
    if (getRank() != root_rank) {
      TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                  "strata: gather: only the root gives output tensors");
      return start(c10d::OpType::GATHER, "gather", args, {}, {in}, nullptr);
    }
    TORCH_CHECK(outputs.size() == 1, "strata: gather: one output list on the root");
    std::vector<at::Tensor> list = outputs[0];
    check_list(list, size_, in, "gather");
    at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
    args.recvbuf = flat.data_ptr();
    return start(c10d::OpType::GATHER, "gather", args, list, {in, flat},
                 [flat, list] { copy_out(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override {
    const at::Tensor &out = single(outputs, "scatter");
    int root_rank = root(opts.rootRank, "scatter");
    strata_coll_args args =
        make_args(STRATA_COLL_SCATTER, nullptr, out.data_ptr(), out.numel(), dtype_of(out));
    args.root = root_rank;
    if (getRank() != root_rank) {
      TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                  "strata: scatter: only the root gives input tensors");
      return start(c10d::OpType::SCATTER, "scatter", args, {out}, {}, nullptr);
    }
    TORCH_CHECK(inputs.size() == 1, "strata: scatter: one input list on the root");
    check_list(inputs[0], size_, out, "scatter");
    at::Tensor flat = flat_copy(inputs[0]);
    args.sendbuf = flat.data_ptr();
    return start(c10d::OpType::SCATTER, "scatter", args, {out}, {flat}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override {
    strata_coll_args args = make_args(STRATA_COLL_BARRIER, nullptr, nullptr, 0, STRATA_U8);
    return start(c10d::OpType::BARRIER, "barrier", args, {}, {}, nullptr);
  }

  // Tags are not matched: messages between a pair arrive in the order they were sent.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst_rank,
                                      int) override {
    const at::Tensor &t = single(tensors, "send");
    strata_coll_args args =
        make_args(STRATA_COLL_SEND, t.data_ptr(), nullptr, t.numel(), dtype_of(t));
    args.root = root(dst_rank, "send");
    return start(c10d::OpType::SEND, "send", args, {}, {t}, nullptr);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src_rank,
                                      int) override {
    const at::Tensor &t = single(tensors, "recv");
    strata_coll_args args =
        make_args(STRATA_COLL_RECV, nullptr, t.data_ptr(), t.numel(), dtype_of(t));
    args.root = root(src_rank, "recv");
    return start(c10d::OpType::RECV, "recv", args, {t}, {}, nullptr);
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

  void check_even_splits(const std::vector<int64_t> &splits, const at::Tensor &tensor,
                         const char *what) const {
    if (splits.empty()) return;
    int64_t rows = tensor.dim() ? tensor.size(0) : 0;
    bool even = splits.size() == static_cast<size_t>(size_);
    for (int64_t split : splits) even = even && split * size_ == rows;
    TORCH_CHECK(even, "strata: alltoall_base: ", what,
                " must split dim 0 evenly across the ranks (uneven splits are not supported)");
  }

  c10::intrusive_ptr<c10d::Work> start(c10d::OpType type, const char *what,
                                       const strata_coll_args &args,
                                       std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> keep, std::function<void()> after) {
    strata_request *request = nullptr;
    int status = strata_collective(comm_, &args, &request);
    TORCH_CHECK(status == STRATA_OK, failure_text(what, status));
    auto work = c10::make_intrusive<StrataWork>(getRank(), type, outputs, signal_);
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      for (at::Tensor &tensor : outputs) keep.push_back(std::move(tensor));
      queue_.push_back(Pending{work, request, what, std::move(keep), std::move(after)});
    }
    signal_->cv.notify_all();
    return work;
  }

  // Waits for one request. strata_request_wait holds the communicator's lock until the request
  // completes, so while nobody waits for this Work the caller may be starting the next calls
  // (DDP's buckets, during backward): then the request is polled with strata_request_test,
  // which never blocks a caller, while the communicator's progress thread moves it; the polls
  // back off from yields to sleeps of up to 1 ms, and a caller's wait cuts a sleep short.
  int wait_for_request(Pending &pending) {
    auto pause = std::chrono::microseconds(0);
    for (int polls = 0;; polls++) {
      {
        std::lock_guard<std::mutex> lock(signal_->mutex);
        if (pending.work->waited()) break;
      }
      int status = strata_request_test(pending.request);
      if (status != STRATA_ERR_IN_PROGRESS) return status;
      if (polls < 16) {
        std::this_thread::yield();
        continue;
      }
      pause = std::min(std::max(pause * 2, std::chrono::microseconds(20)),
                       std::chrono::microseconds(1000));
      std::unique_lock<std::mutex> lock(signal_->mutex);
      signal_->cv.wait_for(lock, pause, [&] { return pending.work->waited(); });
    }
    return strata_request_wait(pending.request);
  }

  // The completion thread: requests in the order they started, until the group is destroyed
  // and nothing is pending.
  void complete_in_order() {
    at::AutoGradMode no_grad(false);  // the copies out of flat buffers are not part of a graph
    for (;;) {
      Pending pending;
      {
        std::unique_lock<std::mutex> lock(signal_->mutex);
        signal_->cv.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        pending = std::move(queue_.front());
        queue_.pop_front();
      }
      int status = wait_for_request(pending);
      std::exception_ptr error;
      if (status != STRATA_OK) {
        error = std::make_exception_ptr(std::runtime_error(failure_text(pending.what, status)));
      } else if (pending.after) {
        try {
          pending.after();
        } catch (...) {
          error = std::current_exception();
        }
      }
      pending.keep.clear();
      pending.after = nullptr;
      pending.work->complete(error);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  strata_store_ops ops_{};
  strata_comm *comm_ = nullptr;
  std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::deque<Pending> queue_;  // under signal_->mutex
  bool stopping_ = false;
  std::thread thread_;
};

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::duration<double> timeout) {
  return c10::make_intrusive<ProcessGroupStrata>(store, rank, size, timeout.count());
}

}  // namespace

PYBIND11_MODULE(_torch, module) {
  module.doc() = "The torch.distributed backend \"strata\" (import strata.torch to register it).";
  module.def("create_process_group", &create_process_group, pybind11::arg("store"),
             pybind11::arg("rank"), pybind11::arg("world_size"), pybind11::arg("timeout"),
             pybind11::call_guard<pybind11::gil_scoped_release>(),
             "The c10d ProcessGroup of one group: torch.distributed calls it through "
             "Backend.register_backend.");
  module.def("version", [] { return std::string(strata_version()); });
}
