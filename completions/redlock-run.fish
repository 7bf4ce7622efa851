# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_run_global_optspecs
    string join \n k/key= prefix= r/redis= node-timeout= password-file= sentinel-password-file= tls-ca= tls-cert= tls-key= tls-insecure config= no-config t/ttl= kill-after= w/wait= wait-unfair s/shared hold= once-per= once-per-success= retry= retry-delay= max-runtime= timeout= leftovers= jitter= fence replicas= restart-grace= durable limit= E/busy-exit-code= c/command= q/quiet v/verbose log-format= record-command= report= metrics-file= ping= ping-busy ping-timeout= on-failure= h/help V/version
end

function __fish_redlock_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_run_global_optspecs) -- $cmd 2>/dev/null
    or return 0
    contains -- -- $cmd
    and return 1
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_run_using_subcommand
    set -l cmd (__fish_redlock_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock-run -n "__fish_redlock_run_needs_command" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s t -l ttl -d 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l kill-after -d 'Grace between SIGTERM and SIGKILL when the command must stop [default: TTL/3, at most 10s]' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s w -l wait -d 'Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and are served in arrival order (as the Redis nodes\' clocks see it), each woken by the release before its turn' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l hold -d 'Keep the lock at least this long after taking it, even if the command ends sooner' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l once-per -d 'Start at most once per aligned window of whole seconds (e.g. 1h), across all hosts' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l once-per-success -d 'Like --once-per, but only a run whose command exits 0 uses up the window: a failed, lost, timed-out or killed run frees it for the next firing on any host' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l retry -d 'Run the command again, up to N more times, while it exits non-zero, keeping the lock in between; not after a lost lock, --max-runtime or a signal. The exit status is the last attempt\'s' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l retry-delay -d 'Pause before the first retry, doubled for each later one, with jitter (each pause is a random time between half and all of it) [default: 1s]' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-runtime -d 'Stop the command (its whole tree) after it ran this long: SIGTERM, then SIGKILL after --kill-after; exit 124 (what timeout(1) does; systemd\'s RuntimeMaxSec)' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l leftovers -d 'When the command exits but processes it started still run: keep the lock until the last one has exited (wait), or stop them all (kill: SIGTERM, then SIGKILL after --kill-after) and then release' -r -f -a "wait\t'Keep the lock until the last of them has exited'
kill\t'Stop them (SIGTERM, then SIGKILL after --kill-after), then release'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l jitter -d 'Sleep a random time in [0, DURATION) before the first attempt' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l replicas -d 'Count a node\'s write (the lock, each extension, the fencing token) only once N of its replicas acknowledged it (WAIT N within --node-timeout), so that a failover to one of them keeps the lock' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l restart-grace -d 'A node up for less than this gives no vote: restarted, it may have forgotten a lock that is still held (Redlock\'s delayed restart). Not for a node that writes every change to disk first (appendonly yes, appendfsync always); 0 trusts every node. Keep it at least the longest --ttl any run of the lock uses [default: the TTL]' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l limit -d 'Let up to N holders run at once (a semaphore of N slots); the command gets REDLOCK_SLOT. Plain runs of the name are kept out while a slot is held, and a run that asks for another N than the holders is refused (64)' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s E -l busy-exit-code -d 'Exit status when the lock is held elsewhere' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s c -l command -d 'Run STRING with /bin/sh -c instead of a command given after --' -r -f -a "(__fish_complete_command)"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l log-format -d 'Log lines on stderr as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l record-command -d 'What the holder record (shown by status on every host, readable by anyone who can read the nodes) keeps of the command: name (the program\'s name only: `report.sh`, or `/bin/sh -c pg_dump …` for -c) or masked (the command line with what looks like a credential masked, cut to 200 characters)' -r -f -a "name\t'The program\'s name only'
masked\t'The command line, what looks like a credential masked, cut to 200 characters'"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l report -d 'Write a JSON summary of the run to FILE when it ends (busy, lost and timed-out runs too)' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l metrics-file -d 'Record the run in FILE, a node_exporter textfile-collector file shared by every run and key on the host: runs by outcome, how many nodes answered and failed, and the last run\'s start, duration, exit status and success time' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l ping -d 'Ping URL (the healthchecks.io protocol) for the run that takes the lock: URL/start when the command starts, URL/0 or URL/<status> when the run ends (a POST with a summary), URL/fail when fewer than a quorum answered; a run that finds the lock busy sends nothing. Its path is a secret: logs show URL/***' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l ping-timeout -d 'The time each ping may take, its tries included, and --on-failure too; never spent while the lock is held' -r -f
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l on-failure -d 'Run CMD with /bin/sh -c after a run that took the lock and failed, or that could not take it (69), once the lock is released; it gets REDLOCK_KEY, REDLOCK_OUTCOME, REDLOCK_EXIT_STATUS and REDLOCK_RUN_ID, and is killed after --ping-timeout' -r -f -a "(__fish_complete_command)"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l wait-unfair -d 'Do not queue: race every other contender for the lock whenever it is released (woken together), and take it even when waiters are queued'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s s -l shared -d 'Take the lock as a reader: readers run together; a run without --shared (a writer) runs alone, with no reader and no other writer (flock -s, across hosts). A waiting writer is not overtaken by readers that come after it. Not with --limit or --fence'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l fence -d 'Give the command REDLOCK_FENCING_TOKEN, a number greater than every earlier holder\'s'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l durable -d 'Count a node\'s vote (the lock, each extension) only once the node has it on disk: WAITAOF where the server has it (Redis 7.2, Valkey), else appendfsync always; a node that can prove neither gives no vote'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s q -l quiet -d 'Print nothing when the lock is busy (cron mails any output)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s v -l verbose -d 'Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv releases, backoff and each signal sent to the command (and when, against the lock\'s deadline) too'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l ping-busy -d 'With --ping: a run that finds the lock busy (or its --once-per window used) sends URL/log saying who holds it'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s V -l version -d 'Print version'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "status" -d 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "unlock" -d 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "history" -d 'Show the lock\'s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "forget" -d 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "check" -d 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "config" -d 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l limit -d 'Show the N slots of a lock taken with --limit N (found by itself when a holder recorded N); exit 0 while a slot is free' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l keys -d 'Also list, node by node, every key of the lock that exists there (name, type, time left), found as forget finds them'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l token -d 'Delete only where the lock holds this token (the REDLOCK_TOKEN of a holder that is gone), or a token starting with it (at least the 8 characters status shows)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -l force -d 'Delete whatever holds the lock, after printing who held it'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s n -l count -d 'Show the COUNT most recent runs' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l json -d 'Print one JSON array of runs instead of a table'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -l force -d 'Remove the keys even while the lock is held or waiters are queued, the lock\'s own key too, after printing who held it (a holder still running stops its command at its next heartbeat)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s w -l wait -d 'Probe as a waiter with this --wait: the queue\'s commands and SUBSCRIBE too (nothing is waited for)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l limit -d 'Probe as a holder of one of N slots (--limit N)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l fence -d 'Probe as a run with --fence: the fence counter\'s commands too'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s s -l shared -d 'Probe as a --shared reader'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l prefix -d 'Prefix put before the lock name to form the Redis key' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -s r -l redis -d 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group\'s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l node-timeout -d 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l password-file -d 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l sentinel-password-file -d 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l tls-ca -d 'Trust this CA (PEM) for rediss:// nodes instead of the system roots' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l tls-cert -d 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l config -d 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -s k -l key -d 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without \'{\' or \'}\' (they name the lock\'s helper keys, {<PREFIX><NAME>}:fence and the like)' -r -f
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l tls-insecure -d 'Do not check rediss:// certificates or host names (warns on every run)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l no-config -d 'Read no configuration file'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -l json -d 'Print one JSON object instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -s h -l help -d 'Print help'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "status" -d 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "unlock" -d 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "history" -d 'Show the lock\'s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "forget" -d 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "check" -d 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "config" -d 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status unlock history forget check config help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand unlock" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand forget" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand config" -s r -l redis -r -f -a 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'

# The command to run: after `--`, or the first word after the options that
# is not one. The first word of all is a subcommand or an option: commands
# are not offered there. Prints the command's words typed so far; fails
# where no command is being typed.
function __fish_redlock_run_command_words
    set -l tokens (commandline -opc)
    set -e tokens[1]
    argparse -s (__fish_redlock_run_global_optspecs) -- $tokens 2>/dev/null
    or return 1
    if set -q argv[1]
        if test "$argv[1]" = "$tokens[1]"; and contains -- $argv[1] status unlock history forget check config help
            return 1
        end
    else if not contains -- -- $tokens
        set -q tokens[1]
        or return 1
        string match -q -- '-*' (commandline -ct)
        and return 1
    end
    set -q argv[1]
    and printf '%s\n' $argv
    return 0
end

# Completes it as if it were typed alone: command names, then its own completion.
function __fish_redlock_run_complete_command
    set -l words (__fish_redlock_run_command_words)
    complete -C (string join ' ' -- (string escape -- $words) (commandline -ct))
end

complete -c redlock-run -n "__fish_redlock_run_command_words >/dev/null" -f -a "(__fish_redlock_run_complete_command)"
