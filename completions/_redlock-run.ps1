
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'redlock-run' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'redlock-run'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'redlock-run' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('-t', '-t', [CompletionResultType]::ParameterName, 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'Grace between SIGTERM and SIGKILL when the command must stop [default: TTL/3, at most 10s]')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and are served in arrival order (as the Redis nodes'' clocks see it), each woken by the release before its turn')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and are served in arrival order (as the Redis nodes'' clocks see it), each woken by the release before its turn')
            [CompletionResult]::new('--hold', '--hold', [CompletionResultType]::ParameterName, 'Keep the lock at least this long after taking it, even if the command ends sooner')
            [CompletionResult]::new('--once-per', '--once-per', [CompletionResultType]::ParameterName, 'Start at most once per aligned window of whole seconds (e.g. 1h), across all hosts')
            [CompletionResult]::new('--once-per-success', '--once-per-success', [CompletionResultType]::ParameterName, 'Like --once-per, but only a run whose command exits 0 uses up the window: a failed, lost, timed-out or killed run frees it for the next firing on any host')
            [CompletionResult]::new('--retry', '--retry', [CompletionResultType]::ParameterName, 'Run the command again, up to N more times, while it exits non-zero, keeping the lock in between; not after a lost lock, --max-runtime or a signal. The exit status is the last attempt''s')
            [CompletionResult]::new('--retry-delay', '--retry-delay', [CompletionResultType]::ParameterName, 'Pause before the first retry, doubled for each later one, with jitter (each pause is a random time between half and all of it) [default: 1s]')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command (its whole tree) after it ran this long: SIGTERM, then SIGKILL after --kill-after; exit 124 (what timeout(1) does; systemd''s RuntimeMaxSec)')
            [CompletionResult]::new('--leftovers', '--leftovers', [CompletionResultType]::ParameterName, 'When the command exits but processes it started still run: keep the lock until the last one has exited (wait), or stop them all (kill: SIGTERM, then SIGKILL after --kill-after) and then release')
            [CompletionResult]::new('--jitter', '--jitter', [CompletionResultType]::ParameterName, 'Sleep a random time in [0, DURATION) before the first attempt')
            [CompletionResult]::new('--replicas', '--replicas', [CompletionResultType]::ParameterName, 'Count a node''s write (the lock, each extension, the fencing token) only once N of its replicas acknowledged it (WAIT N within --node-timeout), so that a failover to one of them keeps the lock')
            [CompletionResult]::new('--restart-grace', '--restart-grace', [CompletionResultType]::ParameterName, 'A node up for less than this gives no vote: restarted, it may have forgotten a lock that is still held (Redlock''s delayed restart). Not for a node that writes every change to disk first (appendonly yes, appendfsync always); 0 trusts every node. Keep it at least the longest --ttl any run of the lock uses [default: the TTL]')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Let up to N holders run at once (a semaphore of N slots); the command gets REDLOCK_SLOT. Plain runs of the name are kept out while a slot is held, and a run that asks for another N than the holders is refused (64)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock is held elsewhere')
            [CompletionResult]::new('--busy-exit-code', '--busy-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is held elsewhere')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run STRING with /bin/sh -c instead of a command given after --')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run STRING with /bin/sh -c instead of a command given after --')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log lines on stderr as text, or as one JSON object per line')
            [CompletionResult]::new('--record-command', '--record-command', [CompletionResultType]::ParameterName, 'What the holder record (shown by status on every host, readable by anyone who can read the nodes) keeps of the command: name (the program''s name only: `report.sh`, or `/bin/sh -c pg_dump …` for -c) or masked (the command line with what looks like a credential masked, cut to 200 characters)')
            [CompletionResult]::new('--report', '--report', [CompletionResultType]::ParameterName, 'Write a JSON summary of the run to FILE when it ends (busy, lost and timed-out runs too)')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Record the run in FILE, a node_exporter textfile-collector file shared by every run and key on the host: runs by outcome, how many nodes answered and failed, and the last run''s start, duration, exit status and success time')
            [CompletionResult]::new('--ping', '--ping', [CompletionResultType]::ParameterName, 'Ping URL (the healthchecks.io protocol) for the run that takes the lock: URL/start when the command starts, URL/0 or URL/<status> when the run ends (a POST with a summary), URL/fail when fewer than a quorum answered; a run that finds the lock busy sends nothing. Its path is a secret: logs show URL/***')
            [CompletionResult]::new('--ping-timeout', '--ping-timeout', [CompletionResultType]::ParameterName, 'The time each ping may take, its tries included, and --on-failure too; never spent while the lock is held')
            [CompletionResult]::new('--on-failure', '--on-failure', [CompletionResultType]::ParameterName, 'Run CMD with /bin/sh -c after a run that took the lock and failed, or that could not take it (69), once the lock is released; it gets REDLOCK_KEY, REDLOCK_OUTCOME, REDLOCK_EXIT_STATUS and REDLOCK_RUN_ID, and is killed after --ping-timeout')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--wait-unfair', '--wait-unfair', [CompletionResultType]::ParameterName, 'Do not queue: race every other contender for the lock whenever it is released (woken together), and take it even when waiters are queued')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Take the lock as a reader: readers run together; a run without --shared (a writer) runs alone, with no reader and no other writer (flock -s, across hosts). A waiting writer is not overtaken by readers that come after it. Not with --limit or --fence')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Take the lock as a reader: readers run together; a run without --shared (a writer) runs alone, with no reader and no other writer (flock -s, across hosts). A waiting writer is not overtaken by readers that come after it. Not with --limit or --fence')
            [CompletionResult]::new('--fence', '--fence', [CompletionResultType]::ParameterName, 'Give the command REDLOCK_FENCING_TOKEN, a number greater than every earlier holder''s')
            [CompletionResult]::new('--durable', '--durable', [CompletionResultType]::ParameterName, 'Count a node''s vote (the lock, each extension) only once the node has it on disk: WAITAOF where the server has it (Redis 7.2, Valkey), else appendfsync always; a node that can prove neither gives no vote')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing when the lock is busy (cron mails any output)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing when the lock is busy (cron mails any output)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv releases, backoff and each signal sent to the command (and when, against the lock''s deadline) too')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv releases, backoff and each signal sent to the command (and when, against the lock''s deadline) too')
            [CompletionResult]::new('--ping-busy', '--ping-busy', [CompletionResultType]::ParameterName, 'With --ping: a run that finds the lock busy (or its --once-per window used) sends URL/log saying who holds it')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show the lock''s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered')
            [CompletionResult]::new('forget', 'forget', [CompletionResultType]::ParameterValue, 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses')
            [CompletionResult]::new('config', 'config', [CompletionResultType]::ParameterValue, 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'redlock-run;status' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Show the N slots of a lock taken with --limit N (found by itself when a holder recorded N); exit 0 while a slot is free')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--keys', '--keys', [CompletionResultType]::ParameterName, 'Also list, node by node, every key of the lock that exists there (name, type, time left), found as forget finds them')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;unlock' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Delete only where the lock holds this token (the REDLOCK_TOKEN of a holder that is gone), or a token starting with it (at least the 8 characters status shows)')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Delete whatever holds the lock, after printing who held it')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;history' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Show the COUNT most recent runs')
            [CompletionResult]::new('--count', '--count', [CompletionResultType]::ParameterName, 'Show the COUNT most recent runs')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON array of runs instead of a table')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;forget' {
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Remove the keys even while the lock is held or waiters are queued, the lock''s own key too, after printing who held it (a holder still running stops its command at its next heartbeat)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;check' {
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Probe as a waiter with this --wait: the queue''s commands and SUBSCRIBE too (nothing is waited for)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Probe as a waiter with this --wait: the queue''s commands and SUBSCRIBE too (nothing is waited for)')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Probe as a holder of one of N slots (--limit N)')
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--fence', '--fence', [CompletionResultType]::ParameterName, 'Probe as a run with --fence: the fence counter''s commands too')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Probe as a --shared reader')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Probe as a --shared reader')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;config' {
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Prefix put before the lock name to form the Redis key')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis', '--redis', [CompletionResultType]::ParameterName, 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--node-timeout', '--node-timeout', [CompletionResultType]::ParameterName, 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]')
            [CompletionResult]::new('--password-file', '--password-file', [CompletionResultType]::ParameterName, 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)')
            [CompletionResult]::new('--sentinel-password-file', '--sentinel-password-file', [CompletionResultType]::ParameterName, 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust this CA (PEM) for rediss:// nodes instead of the system roots')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Private key (PEM) of --tls-cert')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it')
            [CompletionResult]::new('-k', '-k', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not check rediss:// certificates or host names (warns on every run)')
            [CompletionResult]::new('--no-config', '--no-config', [CompletionResultType]::ParameterName, 'Read no configuration file')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'redlock-run;help' {
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)')
            [CompletionResult]::new('unlock', 'unlock', [CompletionResultType]::ParameterValue, 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show the lock''s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered')
            [CompletionResult]::new('forget', 'forget', [CompletionResultType]::ParameterValue, 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses')
            [CompletionResult]::new('config', 'config', [CompletionResultType]::ParameterValue, 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'redlock-run;help;status' {
            break
        }
        'redlock-run;help;unlock' {
            break
        }
        'redlock-run;help;history' {
            break
        }
        'redlock-run;help;forget' {
            break
        }
        'redlock-run;help;check' {
            break
        }
        'redlock-run;help;config' {
            break
        }
        'redlock-run;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
