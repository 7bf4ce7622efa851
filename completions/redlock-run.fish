complete -c redlock-run -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>' -r
complete -c redlock-run -l prefix -d 'Prefix put before the lock name to form the Redis key' -r
complete -c redlock-run -s r -l redis -d 'Redis node URL; repeat it or separate with commas for a Redlock quorum of N nodes' -r -f
complete -c redlock-run -s t -l ttl -d 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)' -r
complete -c redlock-run -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s]' -r
complete -c redlock-run -l kill-after -d 'Grace between SIGTERM and SIGKILL when the command must stop [default: TTL/3, at most 10s]' -r
complete -c redlock-run -s w -l wait -d 'Keep trying this long (or `forever`) while the lock is held elsewhere; a release wakes waiters at once' -r
complete -c redlock-run -l hold -d 'Keep the lock at least this long after taking it, even if the command ends sooner' -r
complete -c redlock-run -l once-per -d 'Start at most once per aligned window of whole seconds (e.g. 1h), across all hosts' -r
complete -c redlock-run -l timeout -d 'Stop the command after it ran this long: SIGTERM, then SIGKILL after --kill-after; exit 124' -r
complete -c redlock-run -l jitter -d 'Sleep a random time in [0, DURATION) before the first attempt' -r
complete -c redlock-run -s E -l busy-exit-code -d 'Exit status when the lock is held elsewhere' -r
complete -c redlock-run -s c -l command -d 'Run STRING with /bin/sh -c instead of a command given after --' -r -f -a "(__fish_complete_command)"
complete -c redlock-run -s q -l quiet -d 'Print nothing when the lock is busy (cron mails any output)'
complete -c redlock-run -s v -l verbose -d 'Say more on stderr: -v each decision, -vv every node and heartbeat'
complete -c redlock-run -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -s V -l version -d 'Print version'
