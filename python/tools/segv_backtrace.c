/* LD_PRELOAD diagnostic for machines without gdb: on SIGSEGV/SIGBUS/SIGABRT prints the native backtrace (the
 * libraries' exported symbols) and the faulting thread, then dies by the same signal.
 *   gcc -shared -fPIC -O0 -o /tmp/segv_backtrace.so python/tools/segv_backtrace.c
 *   LD_PRELOAD=/tmp/segv_backtrace.so python3 ... */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

static void on_fault(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  char head[160];
  int n = snprintf(head, sizeof head, "\n=== segv_backtrace: signal %d (%s) at address %p, thread %ld ===\n", sig,
                   strsignal(sig), info ? info->si_addr : 0, (long)gettid());
  write(2, head, (size_t)n);
  void* frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  static char stack[1 << 16];
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
  sigaltstack(&ss, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
}
