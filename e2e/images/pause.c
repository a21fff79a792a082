/* The pod sandbox's process (what registry.k8s.io/pause does): holds the pod's namespaces
 * open, reaps zombies, exits on SIGINT/SIGTERM. Built statically by e2e/images/build.sh,
 * since nothing can be pulled here. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction quit_action = {.sa_handler = quit};
  struct sigaction reap_action = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &quit_action, NULL);
  sigaction(SIGTERM, &quit_action, NULL);
  sigaction(SIGCHLD, &reap_action, NULL);
  for (;;) pause();
  return 1;
}
