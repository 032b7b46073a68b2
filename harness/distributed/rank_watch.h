// A rank that dies or stops answering, named within a bounded time: every rank of a job beats a heartbeat into the
// job's c10d TCPStore (its own client connection, so a collective or a rendezvous blocked on the main one never holds
// it) every `period`; rank 0 reads every rank's, the others read rank 0's and rank 0's verdict. A rank whose heartbeat
// has not changed for `lost_after` is lost (died, SIGSTOPped, its node gone) — a process stopped whole stops its
// heartbeat thread too; a rank still training keeps beating however long its training takes. Rank 0 then posts the
// verdict in the store, calls `on_stop` (validate --fleet writes its partial report there) and the process exits
// with on_stop's code; each other rank exits when it reads the verdict (or names rank 0 when rank 0's heartbeat, or
// the store itself, stops answering).
//
// A launcher that stops the job (torchrun stops every rank with SIGTERM the moment one fails): SIGTERM, SIGINT and
// SIGHUP are caught; each rank acknowledges in the store and exits; rank 0 waits up to `ack_wait` for every other
// rank's acknowledgement and names the ranks that never gave one (dead or stopped) before calling on_stop. The process
// exits from the watch thread (on_stop runs there, then _exit): the training thread is never waited for.
#pragma once

#include "distributed/process_group.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ampcheck::distributed {

struct LostRank {
  int64_t rank = 0;
  std::string host;        // from its last heartbeat ("" never seen)
  std::string last_phase;  // what it said it was doing in its last heartbeat
  double silent_s = 0;     // since its heartbeat last changed (or since the watch started)
  std::string how;         // "stopped answering" | "never answered" | "did not answer the stop"
};
// "rank 2 (node7) stopped answering 3.1 s ago (last: training repetition 3)"
std::string describe(const LostRank& r);

struct WatchOptions {
  std::chrono::milliseconds period{1000};          // a heartbeat every period; rank 0 reads all every period
  std::chrono::milliseconds lost_after{60000};     // a heartbeat unchanged this long: lost
  std::chrono::milliseconds start_grace{1800000};  // a rank whose first heartbeat never came, waited this long
  std::chrono::milliseconds ack_wait{5000};        // on a stop signal, rank 0 waits this long for the others' answers
  std::string host;                                // this rank's host name, sent in its heartbeat
};

class RankWatch {
 public:
  // Called on the watch thread when the job must end. `lost`: the ranks named (empty: a stop signal every rank
  // answered, or another rank's verdict); `why`: one sentence. The process then exits: 1 when a rank was lost or
  // rank 0 said so, 128 + the signal when stopped by one that every rank answered.
  using OnStop = std::function<void(const std::vector<LostRank>& lost, const std::string& why)>;
  // Connects to the job's store (make_store's server first, then a client of its own), installs the signal
  // handlers and starts the watch thread. Throws naming the store when it cannot be reached.
  RankWatch(const RankEnv& env, WatchOptions opts, OnStop on_stop);
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  // What this rank is doing, sent with its heartbeat ("training repetition 3"): how a lost rank is described.
  void set_phase(const std::string& phase);
  // After a collective failed (a peer's connection closed): gives the watch the time to name the lost rank (the
  // process then exits there); returns if none was named within lost_after + ack_wait + 3 periods.
  void wait_for_verdict();
  // The run is over: the watch stops (blocks for good while a stop is under way: that one ends the process), the
  // signal handlers are restored.
  void finish();

 private:
  void loop();
  void beat();
  void poll();
  void on_signal(int sig);
  // Ends the process with `code` (after on_stop); returns only when finish() came first.
  void stop(const std::vector<LostRank>& lost, const std::string& why, int code);
  std::string key(const std::string& what, int64_t rank) const;

  RankEnv env_;
  WatchOptions opts_;
  OnStop on_stop_;
  c10::intrusive_ptr<c10d::Store> store_;  // this watch's own client of the job's TCPStore
  std::string prefix_;
  std::chrono::steady_clock::time_point started_;
  int64_t beats_ = 0;
  std::mutex phase_mutex_;
  std::string phase_ = "starting";
  struct Seen {
    std::string value;  // the last heartbeat read ("" none yet)
    std::chrono::steady_clock::time_point changed;
  };
  std::vector<Seen> seen_;
  std::chrono::steady_clock::time_point store_failing_since_{};
  std::string store_error_;
  std::mutex stop_mutex_;  // held by a stop (until _exit) and by finish()
  std::atomic<bool> stopping_{false};
  bool finished_ = false;
  std::mutex quit_mutex_;
  std::condition_variable quit_cv_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace ampcheck::distributed
