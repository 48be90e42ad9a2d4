// File: worker/sandblaster_lbfgs.h
//
// Sandblaster's L-BFGS driver, run by the coordinator in the chief: the
// two-loop recursion (Nocedal & Wright, Algorithm 7.4) and a backtracking
// Armijo line search, written as programs of shard-side vector operations
// (common/vector_program.h) so that only scalars reach the coordinator;
// the shards (server/lbfgs_shard.h) hold x, g, d and the (s, y) pairs.
// Nothing here talks RPC: the shards are a ShardVectorOps and the
// objective an Objective (worker/sandblaster_job.h wires both to gRPC and
// the portion table).
//
// One iteration k on batch B_k:
//   g = grad f_k(x)                         (an evaluation; reused when the
//                                            batch is the same as k-1's)
//   d = -H g                                 (two-loop; -g with no history
//                                            or when not a descent)
//   t = 1 (the first iteration: 1/|g|), x_t = x + t d, f_k(x_t), grad f_k(x_t)
//   while f_k(x_t) > f_k(x) + c1 t g.d: t <- max(0.1 t, min(0.5 t, t_quad))
//   s = t d, y = grad f_k(x_t) - g  (both on B_k, so the pair is consistent
//                                    under sampling); kept when s.y > 0
//
//   LbfgsDriver driver(options, ops, objective);
//   DP_ASSIGN_OR_RETURN(LbfgsResult r, driver.Run());
//
// Thread-compatible: Run once from one thread.
#ifndef DOWNPOUR_WORKER_SANDBLASTER_LBFGS_H_
#define DOWNPOUR_WORKER_SANDBLASTER_LBFGS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/vector_program.h"

namespace downpour {

// Every shard: runs one program on each and returns the dot products
// summed over the shards.
class ShardVectorOps {
 public:
  virtual ~ShardVectorOps() = default;
  virtual absl::StatusOr<std::vector<double>> Run(
      const std::vector<VectorOp>& program) = 0;
};

// The objective on the batch of `iteration` at the published x: returns
// f and leaves its gradient in `into` on the shards; `examples` receives
// the examples the evaluation processed.
class Objective {
 public:
  virtual ~Objective() = default;
  virtual absl::StatusOr<double> Evaluate(int64_t iteration, VecRef into,
                                          int64_t* examples) = 0;
  // Whether iteration k+1's batch is iteration k's (a full batch).
  virtual bool SameBatch(int64_t iteration) const = 0;
};

struct LbfgsOptions {
  int history = 10;            // m: (s, y) pairs kept.
  double armijo_c1 = 1e-4;
  int max_line_search = 10;    // Trial points per iteration.
  // Stop once the evaluations processed this many examples (0: no bound)
  // or after max_iterations (0: no bound).
  int64_t max_examples = 0;
  int64_t max_iterations = 0;
  // Called after each iteration with (iteration, f); may be null.
  std::function<void(int64_t, double)> on_iteration;
  // Polled between iterations; true stops the run. May be null.
  std::function<bool()> stop;
};

struct LbfgsResult {
  int64_t iterations = 0;
  int64_t evaluations = 0;
  int64_t line_search_evaluations = 0;
  int64_t examples = 0;
  int64_t history_resets = 0;
  double final_loss = 0;
};

class LbfgsDriver {
 public:
  // ops and objective are not owned and must outlive the driver.
  LbfgsDriver(LbfgsOptions options, ShardVectorOps* ops, Objective* objective);

  // Loads x from what the shards serve and iterates until a bound.
  absl::StatusOr<LbfgsResult> Run();

  // d = -H g by the two-loop recursion over the history held now (exposed
  // for tests). Returns g.d.
  absl::StatusOr<double> Direction();
  // Appends the pair in the slot after the newest (tests); false (and the
  // slot dropped) when s.y is not positive.
  absl::StatusOr<bool> PushPair(double sy, double yy, int32_t slot);
  // The next free slot for a pair.
  int32_t NextSlot() const;

 private:
  struct Pair {
    int32_t slot;
    double rho;  // 1 / s.y
    double gamma;  // s.y / y.y
  };

  absl::StatusOr<double> Dot(VecRef a, VecRef b);

  const LbfgsOptions options_;
  ShardVectorOps* const ops_;   // Not owned.
  Objective* const objective_;  // Not owned.
  std::deque<Pair> history_;    // Oldest first.
};

}  // namespace downpour

#endif  // DOWNPOUR_WORKER_SANDBLASTER_LBFGS_H_
