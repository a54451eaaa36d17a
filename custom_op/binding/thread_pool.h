// The batch's threads: runs tasks on a given number of C++ threads (the
// caller's included), each of which runs ATen's parallel kernels on itself.
// It owns thread creation and the OpenMP bound, not what the tasks do.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

// OpenMP's per-thread team size, from the runtime that libtorch loads. Weak:
// a torch built without OpenMP has none, and then no team to bound.
extern "C" {
__attribute__((weak)) void omp_set_num_threads(int);
__attribute__((weak)) int omp_get_max_threads();
}

namespace {

// While it lives, ATen's parallel kernels called on this thread (the
// resize) run on this thread alone. The batch's own threads are its
// parallelism: without this, each would start an OpenMP team of
// torch.get_num_threads() threads, N x N threads on N cores. It changes only
// this thread's OpenMP setting, never torch.set_num_threads' global one.
class OneIntraOpThread {
 public:
  OneIntraOpThread() {
    if (omp_set_num_threads == nullptr || omp_get_max_threads == nullptr) {
      return;
    }
    // ATen initialises a thread's setting on its first parallel call, from
    // the global one: let it do so now, or it would overwrite ours later.
    torch::stable::get_num_threads();
    previous_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  ~OneIntraOpThread() {
    if (previous_ > 0) {
      omp_set_num_threads(previous_);
    }
  }
  OneIntraOpThread(const OneIntraOpThread&) = delete;
  OneIntraOpThread& operator=(const OneIntraOpThread&) = delete;

 private:
  int previous_ = 0;
};

// Runs task(i) for i in [0, count) on `num_threads` threads (the caller's
// included), each taking the next index when done with one, and each
// running ATen's kernels on itself (OneIntraOpThread).
template <typename Task>
void run_in_parallel(size_t count, int64_t num_threads, const Task& task) {
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    const OneIntraOpThread one_thread;
    for (size_t i = next++; i < count; i = next++) {
      task(i);
    }
  };
  std::vector<std::thread> threads;
  const size_t extra = static_cast<size_t>(std::max<int64_t>(num_threads, 1)) - 1;
  for (size_t t = 0; t < std::min(extra, count); ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // No more threads to be had: the ones running finish the work.
    }
  }
  // The started threads are joined whatever the caller's share of the work
  // does: a std::thread destroyed unjoined calls std::terminate, which would
  // take the whole process (a DataLoader, a training job) down with it.
  struct JoinAll {
    std::vector<std::thread>& threads;
    ~JoinAll() {
      for (std::thread& thread : threads) {
        if (thread.joinable()) {
          thread.join();
        }
      }
    }
  } join_all{threads};
  worker();
}

// For the tests: torch.get_num_threads() as each of `num_threads` batch
// threads sees it while working (ATen sizes its OpenMP teams by it).
std::vector<int64_t> intra_op_threads_in_batch(int64_t num_threads) {
  std::vector<int64_t> seen(static_cast<size_t>(std::max<int64_t>(num_threads, 1)) * 4);
  run_in_parallel(seen.size(), num_threads,
                  [&](size_t i) { seen[i] = static_cast<int64_t>(torch::stable::get_num_threads()); });
  return seen;
}

}  // namespace
