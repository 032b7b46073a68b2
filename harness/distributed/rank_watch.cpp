// Heartbeats through the job's TCPStore, the lost rank named, a launcher's stop answered (rank_watch.h).
#include "distributed/rank_watch.h"

#include "io/text.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace ampcheck::distributed {

namespace {

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

// seconds in a message: two significant digits below 10 s ("0.25", "9.5"), else three ("12.5", "300")
std::string seconds_text(double s) { return io::number_text(s, s < 10 ? 2 : 3); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }
// a heartbeat: "<count>\t<host>\t<phase>"
std::string field(const std::string& beat, int index) {
  size_t at = 0;
  for (int i = 0; i < index; ++i) {
    at = beat.find('\t', at);
    if (at == std::string::npos) return "";
    ++at;
  }
  return beat.substr(at, beat.find('\t', at) == std::string::npos ? std::string::npos : beat.find('\t', at) - at);
}
const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP"; }

}  // namespace

std::string describe(const LostRank& r) {
  return "rank " + std::to_string(r.rank) + (r.host.empty() ? "" : " (" + r.host + ")") + " " + r.how + " (silent " +
         seconds_text(r.silent_s) + " s" + (r.last_phase.empty() ? "" : "; last: " + r.last_phase) + ")";
}

RankWatch::RankWatch(const RankEnv& env, WatchOptions opts, OnStop on_stop)
    : env_(env), opts_(std::move(opts)), on_stop_(std::move(on_stop)), started_(std::chrono::steady_clock::now()) {
  (void)make_store(env, opts_.start_grace, "fleet-watch");  // rank 0's server, where rank 0 hosts it
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = false;
  o.numWorkers = std::nullopt;
  o.waitWorkers = false;
  o.timeout = opts_.start_grace;  // connecting: the server may come up late
  store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  store_->setTimeout(std::max(std::chrono::milliseconds(1000), opts_.lost_after / 2));  // an op: never for long
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");  // a restarted job's keys apart from the last's
  prefix_ = "ampcheck/fleet-watch/" + std::string(restart && *restart ? restart : "0") + "/";
  seen_.assign(static_cast<size_t>(env.world_size), Seen{"", started_});
  g_signal.store(0);
  struct sigaction sa = {};
  sa.sa_handler = remember_signal;
  sa.sa_flags = SA_RESTART;  // the training thread's system calls go on; the watch thread reads the flag
  sigemptyset(&sa.sa_mask);
  for (int sig : kStopSignals) ::sigaction(sig, &sa, nullptr);
  beat();
  thread_ = std::thread([this] { loop(); });
}

RankWatch::~RankWatch() { finish(); }

std::string RankWatch::key(const std::string& what, int64_t rank) const {
  return prefix_ + what + "/" + std::to_string(rank);
}

void RankWatch::set_phase(const std::string& phase) {
  std::lock_guard<std::mutex> lock(phase_mutex_);
  phase_ = phase;
}

void RankWatch::finish() {
  std::unique_lock<std::mutex> stop_lock(stop_mutex_);  // a stop under way holds it until _exit
  if (finished_) return;
  finished_ = true;
  {
    std::lock_guard<std::mutex> lock(quit_mutex_);
    quit_ = true;
  }
  quit_cv_.notify_all();
  stop_lock.unlock();
  if (thread_.joinable()) thread_.join();
  for (int sig : kStopSignals) ::signal(sig, SIG_DFL);
}

void RankWatch::wait_for_verdict() {
  const auto deadline = std::chrono::steady_clock::now() + opts_.lost_after + opts_.ack_wait + 3 * opts_.period;
  while (std::chrono::steady_clock::now() < deadline || stopping_.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void RankWatch::loop() {
  auto next_beat = std::chrono::steady_clock::now() + opts_.period;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(quit_mutex_);
      if (quit_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return quit_; })) return;
    }
    if (const int sig = g_signal.load()) {
      on_signal(sig);  // ends the process, unless finish() came first
      return;
    }
    if (std::chrono::steady_clock::now() < next_beat) continue;
    next_beat = std::chrono::steady_clock::now() + opts_.period;
    beat();
    poll();
  }
}

void RankWatch::beat() {
  std::string phase;
  {
    std::lock_guard<std::mutex> lock(phase_mutex_);
    phase = phase_;
  }
  try {
    store_->set(key("beat", env_.rank), bytes(std::to_string(++beats_) + "\t" + opts_.host + "\t" + phase));
    store_failing_since_ = {};
  } catch (const std::exception& e) {
    if (store_failing_since_ == std::chrono::steady_clock::time_point{})
      store_failing_since_ = std::chrono::steady_clock::now();
    store_error_ = e.what();
  }
}

void RankWatch::poll() {
  const auto now = std::chrono::steady_clock::now();
  auto silent = [&](const Seen& s) { return std::chrono::duration<double>(now - s.changed).count(); };
  auto lost_rank = [&](int64_t r, const char* how) {
    const Seen& s = seen_[static_cast<size_t>(r)];
    return LostRank{r, field(s.value, 1), field(s.value, 2), silent(s), how};
  };
  if (store_failing_since_ != std::chrono::steady_clock::time_point{} &&
      now - store_failing_since_ >= opts_.lost_after) {
    const std::string where = env_.master_addr + ":" + std::to_string(env_.master_port);
    return stop(env_.rank == 0 ? std::vector<LostRank>{} : std::vector<LostRank>{lost_rank(0, "stopped answering")},
                "the job's store at " + where + " has not answered for " +
                    seconds_text(std::chrono::duration<double>(now - store_failing_since_).count()) +
                    " s (its host, rank 0 or the launcher's agent, died or stopped): " + store_error_,
                1);
  }
  try {
    std::vector<int64_t> watched;
    if (env_.rank == 0)
      for (int64_t r = 1; r < env_.world_size; ++r) watched.push_back(r);
    else
      watched.push_back(0);
    if (env_.rank != 0 && store_->check({key("verdict", 0)}))
      return stop({}, "rank 0 stopped the fleet: " + text(store_->get(key("verdict", 0))), 1);
    std::vector<LostRank> lost;
    for (int64_t r : watched) {
      Seen& s = seen_[static_cast<size_t>(r)];
      const std::string k = key("beat", r);
      if (store_->check({k})) {
        const std::string v = text(store_->get(k));
        if (v != s.value) s = Seen{v, now};
      }
      if (!s.value.empty() && now - s.changed >= opts_.lost_after) lost.push_back(lost_rank(r, "stopped answering"));
      if (s.value.empty() && now - s.changed >= opts_.start_grace) lost.push_back(lost_rank(r, "never answered"));
    }
    if (!lost.empty()) {
      std::string why;
      for (const auto& l : lost) why += (why.empty() ? "" : "; ") + describe(l);
      why += " — no heartbeat for " + seconds_text(std::chrono::duration<double>(opts_.lost_after).count()) +
             " s: it died, was stopped or lost its node";
      stop(lost, why, 1);
    }
  } catch (const std::exception& e) {  // the store: counted as above, named after lost_after
    if (store_failing_since_ == std::chrono::steady_clock::time_point{}) store_failing_since_ = now;
    store_error_ = e.what();
  }
}

void RankWatch::on_signal(int sig) {
  const std::string name = signal_name(sig);
  try {
    store_->set(key("answer", env_.rank), bytes(name));  // alive: told to stop, and answering
  } catch (...) {
  }
  if (env_.rank != 0) return stop({}, "stopped by " + name, 128 + sig);
  // rank 0: who else answers within ack_wait? a rank that does not is dead or stopped
  const auto until = std::chrono::steady_clock::now() + opts_.ack_wait;
  std::vector<bool> answered(static_cast<size_t>(env_.world_size), false);
  answered[0] = true;
  for (bool all = false; !all && std::chrono::steady_clock::now() < until;) {
    all = true;
    for (int64_t r = 1; r < env_.world_size; ++r) {
      if (answered[static_cast<size_t>(r)]) continue;
      try {
        answered[static_cast<size_t>(r)] = store_->check({key("answer", r)});
      } catch (...) {
      }
      all = all && answered[static_cast<size_t>(r)];
    }
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<LostRank> lost;
  std::string why = "the job was stopped (" + name + " from the launcher or the user)";
  for (int64_t r = 1; r < env_.world_size; ++r)
    if (!answered[static_cast<size_t>(r)]) {
      const Seen& s = seen_[static_cast<size_t>(r)];
      lost.push_back(LostRank{r, field(s.value, 1), field(s.value, 2),
                              std::chrono::duration<double>(now - s.changed).count(), "did not answer the stop"});
      why += (lost.size() == 1 ? "; " : ", ") + describe(lost.back());
    }
  if (!lost.empty())
    why += " within " + seconds_text(std::chrono::duration<double>(opts_.ack_wait).count()) +
           " s: it died or was stopped (a launcher stops the job when one rank fails)";
  stop(lost, why, lost.empty() ? 128 + sig : 1);
}

void RankWatch::stop(const std::vector<LostRank>& lost, const std::string& why, int code) {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  if (finished_) return;  // the run ended first: its own result stands
  stopping_.store(true);
  if (env_.rank == 0 && !lost.empty()) {
    try {
      store_->set(key("verdict", 0), bytes(why));  // the other ranks read it and exit
    } catch (...) {
    }
  }
  try {
    if (on_stop_) on_stop_(lost, why);
  } catch (const std::exception& e) {
    std::cerr << "rank " << env_.rank << ": stopping: " << e.what() << "\n";
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (env_.store_server) std::this_thread::sleep_for(2 * opts_.period);  // the others read the verdict from our store
  ::_exit(code);
}

}  // namespace ampcheck::distributed
