# wait_launch ACT (sourced by tests/membership_lib.sh and the hosts tests that launch): while
# the launch $launch_pid runs (at most 240 s of polls 0.1 s apart), calls ACT, a function that
# acts once when the line it waits for has come; a launch still running then is stopped
# (SIGTERM, said); then waits for the launch: its exit code in $launch_rc, $launch_pid cleared.
wait_launch() {
  for _ in $(seq 1 2400); do
    "$1"
    kill -0 "$launch_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launch_pid" 2>/dev/null; then
    echo "the launch did not end within 240 s: stopped"
    kill -TERM "$launch_pid"
  fi
  wait "$launch_pid"
  launch_rc=$?
  launch_pid=
}
