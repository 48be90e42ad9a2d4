#include "worker/sandblaster_job.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/sandblaster_lbfgs.h"
#include "worker/sandblaster_portions.h"
#include "worker/sandblaster_rpc.h"

namespace downpour {
namespace {

// The shared order of the training examples: every worker draws the same
// permutation from the seed.
std::vector<int64_t> DataOrder(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed ^ 0x5A4D0B1A57E5ull);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// One worker's loop: ask for work, compute portions, push when asked.
class PortionWorker {
 public:
  PortionWorker(const SandblasterJobOptions& o, Model* model,
                ParameterClient* client, const Dataset& train,
                WorkSource* source, SandblasterShards* shards)
      : o_(o), model_(model), client_(client), train_(train),
        source_(source), shards_(shards),
        order_(DataOrder(train.size, o.seed)),
        n_(model->num_parameters()) {}

  absl::StatusOr<SandblasterJobResult> Run() {
    const absl::Time begin = absl::Now();
    accum_.assign(n_, 0.0f);
    portion_grad_.assign(n_, 0.0f);
    batch_grad_.assign(n_, 0.0f);
    params_.assign(n_, 0.0f);
    const int batch = std::max(1, std::min(o_.compute_batch,
                                           model_->max_batch()));
    x_.resize(static_cast<size_t>(batch) * train_.ExampleSize());
    y_.resize(batch);
    WorkReport req = Ask();
    while (true) {
      if (o_.stop_requested != nullptr && o_.stop_requested->load()) {
        return absl::CancelledError("stopped by signal");
      }
      const bool reported = req.portion >= 0;
      DP_ASSIGN_OR_RETURN(const WorkOrder order, source_->GetWork(req));
      req = Ask();
      if (order.discard) {  // Given up on: our used results were reissued.
        std::fill(accum_.begin(), accum_.end(), 0.0f);
        result_.portions -= pending_used_;
        result_.backup_portions += pending_used_;
        pending_used_ = 0;
      } else if (reported && order.accepted) {
        for (int64_t i = 0; i < n_; ++i) accum_[i] += portion_grad_[i];
        ++result_.portions;
        ++pending_used_;
        result_.examples += last_examples_;
      } else if (reported) {
        ++result_.backup_portions;
      }
      if (order.action == WorkAction::kDone) break;
      if (order.action == WorkAction::kWait) {
        absl::SleepFor(absl::Milliseconds(2));
        continue;
      }
      if (order.action == WorkAction::kPush) {
        const absl::Status pushed = shards_->Accumulate(
            order.eval, o_.worker_id, accum_, client_->shard_map());
        if (absl::IsAborted(pushed)) {
          // A shard already took the next evaluation: this one went on
          // without us (we were given up on), so the gradient is dropped,
          // as with `discard`.
          result_.portions -= pending_used_;
          result_.backup_portions += pending_used_;
        } else {
          DP_RETURN_IF_ERROR(pushed);
          req.pushed_eval = order.eval;
        }
        std::fill(accum_.begin(), accum_.end(), 0.0f);
        pending_used_ = 0;
        continue;
      }
      if (order.eval != accum_eval_) {
        // A new evaluation: nothing of an older one is held (it was pushed
        // or given up on).
        std::fill(accum_.begin(), accum_.end(), 0.0f);
        pending_used_ = 0;
        accum_eval_ = order.eval;
      }
      if (order.eval != x_eval_) {  // Parameters once per evaluation.
        std::vector<int64_t> versions;
        DP_RETURN_IF_ERROR(client_->Pull(absl::MakeSpan(params_), &versions));
        DP_RETURN_IF_ERROR(model_->SetParameters(params_));
        x_eval_ = order.eval;
      }
      DP_ASSIGN_OR_RETURN(const bool finished, Compute(order, batch));
      if (finished) {
        req.eval = order.eval;
        req.portion = order.portion;
        req.loss_sum = loss_sum_;
        req.examples = order.num_examples;
        last_examples_ = order.num_examples;
      }
    }
    result_.seconds = absl::ToDoubleSeconds(absl::Now() - begin);
    return result_;
  }

 private:
  // A request carrying nothing yet.
  WorkReport Ask() const {
    WorkReport r;
    r.worker = o_.worker_id;
    r.incarnation = incarnation_;
    return r;
  }

  // Whether evaluation `eval` still wants results.
  absl::StatusOr<bool> Open(int64_t eval) {
    WorkReport poll = Ask();
    poll.eval = eval;
    poll.poll = true;
    DP_ASSIGN_OR_RETURN(const WorkOrder o, source_->GetWork(poll));
    return o.eval_open;
  }

  // The portion's summed loss (loss_sum_) and gradient (portion_grad_);
  // false when the evaluation closed first (the result is not needed).
  absl::StatusOr<bool> Compute(const WorkOrder& order, int batch) {
    std::fill(portion_grad_.begin(), portion_grad_.end(), 0.0f);
    loss_sum_ = 0;
    const int64_t size = train_.ExampleSize();
    Backend* const backend = model_->backend();
    for (int64_t done = 0; done < order.num_examples;) {
      const int b = static_cast<int>(
          std::min<int64_t>(batch, order.num_examples - done));
      for (int i = 0; i < b; ++i) {
        const int64_t e =
            order_[(order.first_example + done + i) % train_.size];
        std::copy(train_.images.begin() + e * size,
                  train_.images.begin() + (e + 1) * size,
                  x_.begin() + static_cast<int64_t>(i) * size);
        y_[i] = train_.labels[e];
      }
      DP_ASSIGN_OR_RETURN(const StepResult r,
                          model_->ComputeGradients(x_.data(), y_.data(), b));
      DP_RETURN_IF_ERROR(
          backend->CopyToHost(model_->gradients(), batch_grad_.data(), n_));
      DP_RETURN_IF_ERROR(backend->Synchronize());
      for (int64_t i = 0; i < n_; ++i) portion_grad_[i] += b * batch_grad_[i];
      loss_sum_ += static_cast<double>(r.loss) * b;
      done += b;
      ++result_.batches;
      // A straggler's extra time, in slices, so that it still sees the
      // evaluation close.
      for (absl::Duration left = o_.debug_step_delay;
           left > absl::ZeroDuration(); left -= absl::Milliseconds(10)) {
        absl::SleepFor(std::min(left, absl::Milliseconds(10)));
        DP_ASSIGN_OR_RETURN(const bool open, Open(order.eval));
        if (!open) return false;
      }
      if (done < order.num_examples) {
        DP_ASSIGN_OR_RETURN(const bool open, Open(order.eval));
        if (!open) return false;
      }
    }
    return true;
  }

  const SandblasterJobOptions& o_;
  Model* const model_;              // Not owned.
  ParameterClient* const client_;   // Not owned.
  const Dataset& train_;
  WorkSource* const source_;        // Not owned.
  SandblasterShards* const shards_;  // Not owned.
  const std::vector<int64_t> order_;
  const int64_t n_;
  // This process among the worker's (re)starts.
  const uint64_t incarnation_ = std::random_device()() * 0x100000001ull + 1;
  std::vector<float> accum_, portion_grad_, batch_grad_, params_, x_;
  std::vector<int32_t> y_;
  double loss_sum_ = 0;
  int64_t last_examples_ = 0;
  int64_t pending_used_ = 0;  // Used portions not yet pushed.
  int64_t accum_eval_ = -1;
  int64_t x_eval_ = -1;
  SandblasterJobResult result_;
};

// The objective of the driver: an evaluation through the portion table,
// then the used gradients gathered on the shards.
class PortionObjective final : public Objective {
 public:
  PortionObjective(const SandblasterJobOptions& o, int64_t train_size,
                   PortionTable* table, SandblasterShards* shards)
      : o_(o), n_(train_size),
        batch_(std::min<int64_t>(o.sandblaster.batch, train_size)),
        table_(table), shards_(shards) {}

  absl::StatusOr<double> Evaluate(int64_t iteration, VecRef into,
                                  int64_t* examples) override {
    std::vector<Portion> portions;
    const int per = std::max(1, o_.sandblaster.iterations_per_batch);
    const int64_t start = (iteration / per * batch_) % n_;
    for (int64_t at = 0; at < batch_; at += o_.sandblaster.portion_examples) {
      portions.push_back(
          {start + at, static_cast<int32_t>(std::min<int64_t>(
                           o_.sandblaster.portion_examples, batch_ - at))});
    }
    // The shards take pushes of this evaluation only from now on.
    DP_RETURN_IF_ERROR(shards_->Run({VectorOp::Open(eval_ + 1)}).status());
    DP_ASSIGN_OR_RETURN(const EvalOutcome out,
                        table_->Evaluate(++eval_, std::move(portions)));
    if (out.examples <= 0) {
      return absl::InternalError("an evaluation with no examples");
    }
    if (out.workers_given_up > 0 && o_.log) {
      o_.log(absl::StrCat("coordinator: evaluation ", eval_, " gave up on ",
                          out.workers_given_up,
                          " worker(s) that did not push; their portions "
                          "were computed again"));
    }
    DP_RETURN_IF_ERROR(
        shards_
            ->Run({VectorOp::Gather(into, 1.0 / out.examples, eval_,
                                    out.workers)})
            .status());
    *examples = out.examples;
    return out.loss_sum / out.examples;
  }

  bool SameBatch(int64_t k) const override {
    const int per = std::max(1, o_.sandblaster.iterations_per_batch);
    return batch_ >= n_ || k / per == (k + 1) / per;
  }

 private:
  const SandblasterJobOptions& o_;
  const int64_t n_;
  const int64_t batch_;
  PortionTable* const table_;
  SandblasterShards* const shards_;
  int64_t eval_ = 0;
};

void Log(const SandblasterJobOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

}  // namespace

absl::StatusOr<SandblasterJobResult> RunSandblaster(
    const SandblasterJobOptions& o, Model* model, ParameterClient* client,
    const Dataset& train) {
  if (train.size <= 0) return absl::InvalidArgumentError("no training data");
  DP_ASSIGN_OR_RETURN(std::unique_ptr<SandblasterShards> shards,
                      SandblasterShards::Create(o.ps_hosts, o.security,
                                                o.rpc_timeout));
  if (o.worker_id != 0) {
    DP_ASSIGN_OR_RETURN(const std::string address,
                        shards->FindCoordinator(o.coordinator_wait));
    Log(o, absl::StrCat("sandblaster coordinator at ", address));
    DP_ASSIGN_OR_RETURN(std::unique_ptr<WorkSource> source,
                        RemoteWorkSource(address, o.security,
                                         o.coordinator_patience));
    PortionWorker worker(o, model, client, train, source.get(), shards.get());
    return worker.Run();
  }
  // The chief: coordinator, driver and a worker of its own.
  PortionTableOptions to;
  to.num_workers = o.num_workers;
  to.push_timeout = o.push_timeout;
  PortionTable table(to);
  DP_ASSIGN_OR_RETURN(
      std::unique_ptr<CoordinatorServer> server,
      CoordinatorServer::Start(&table, o.coordinator_listen, o.security));
  DP_RETURN_IF_ERROR(shards->SetCoordinator(server->address()));
  Log(o, absl::StrCat("sandblaster coordinator listening on ",
                      server->address(), " (m = ", o.sandblaster.lbfgs_history,
                      ", batch ", std::min<int64_t>(o.sandblaster.batch,
                                                    train.size),
                      ", portions of ", o.sandblaster.portion_examples, ")"));
  PortionObjective objective(o, train.size, &table, shards.get());
  LbfgsOptions lo;
  lo.history = o.sandblaster.lbfgs_history;
  lo.max_examples = static_cast<int64_t>(o.epochs) * train.size;
  const absl::Time begin = absl::Now();
  lo.on_iteration = [&o, begin](int64_t k, double f) {
    Log(o, absl::StrFormat("iteration %d, loss = %.4f (%.1f s)", k + 1, f,
                           absl::ToDoubleSeconds(absl::Now() - begin)));
  };
  lo.stop = [&o] {
    return o.stop_requested != nullptr && o.stop_requested->load();
  };
  LbfgsDriver driver(lo, shards.get(), &objective);
  absl::StatusOr<LbfgsResult> driven = absl::UnknownError("not run");
  std::thread driver_thread([&] {
    const absl::Time asked = absl::Now();
    const int32_t joined = table.WaitForWorkers(o.coordinator_wait);
    if (joined < o.num_workers) {
      Log(o, absl::StrFormat("%d of %d workers joined in %.1f s; starting "
                             "without the others (they join as they come)",
                             joined, o.num_workers,
                             absl::ToDoubleSeconds(absl::Now() - asked)));
    } else if (o.num_workers > 1) {
      Log(o, absl::StrFormat("all %d workers joined in %.1f s", o.num_workers,
                             absl::ToDoubleSeconds(absl::Now() - asked)));
    }
    driven = driver.Run();
    table.Finish(driven.ok() ? "training finished"
                             : std::string(driven.status().message()));
  });
  std::unique_ptr<WorkSource> local = LocalWorkSource(&table);
  PortionWorker worker(o, model, client, train, local.get(), shards.get());
  absl::StatusOr<SandblasterJobResult> mine = worker.Run();
  if (!mine.ok()) table.Finish(std::string(mine.status().message()));
  driver_thread.join();
  // Let the other workers hear kDone before the coordinator goes away (a
  // dead one never asks: at most a few seconds).
  const absl::Time patience = absl::Now() + absl::Seconds(5);
  while (table.WorkersToldDone() < o.num_workers && absl::Now() < patience) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!mine.ok()) return mine.status();  // The driver was cancelled for it.
  if (!driven.ok()) return driven.status();
  const int64_t iterations = std::max<int64_t>(1, driven->iterations);
  Log(o, absl::StrFormat(
             "coordinator traffic: %d bytes of vector programs to the %d "
             "shards and %d bytes of dot products back in %d iterations "
             "(%.0f bytes per iteration; the parameters are %d bytes)",
             shards->program_bytes_sent(), o.ps_hosts.size(),
             shards->program_bytes_received(), driven->iterations,
             static_cast<double>(shards->program_bytes_sent() +
                                 shards->program_bytes_received()) /
                 iterations,
             model->num_parameters() * 4));
  SandblasterJobResult r = *mine;
  r.iterations = driven->iterations;
  r.line_search_evaluations = driven->line_search_evaluations;
  r.evaluations = driven->evaluations;
  r.final_loss = driven->final_loss;
  return r;
}

}  // namespace downpour
