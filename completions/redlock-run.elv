
use builtin;
use str;

set edit:completion:arg-completer[redlock-run] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'redlock-run'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'redlock-run'= {
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand -t 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)'
            cand --ttl 'Lock time-to-live, renewed every TTL/3 while the command runs (500ms, 30s, 2m)'
            cand --kill-after 'Grace between SIGTERM and SIGKILL when the command must stop [default: TTL/3, at most 10s]'
            cand -w 'Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and are served in arrival order (as the Redis nodes'' clocks see it), each woken by the release before its turn'
            cand --wait 'Keep trying this long (or `forever`) while the lock is held elsewhere; waiters queue and are served in arrival order (as the Redis nodes'' clocks see it), each woken by the release before its turn'
            cand --hold 'Keep the lock at least this long after taking it, even if the command ends sooner'
            cand --once-per 'Start at most once per aligned window of whole seconds (e.g. 1h), across all hosts'
            cand --once-per-success 'Like --once-per, but only a run whose command exits 0 uses up the window: a failed, lost, timed-out or killed run frees it for the next firing on any host'
            cand --retry 'Run the command again, up to N more times, while it exits non-zero, keeping the lock in between; not after a lost lock, --max-runtime or a signal. The exit status is the last attempt''s'
            cand --retry-delay 'Pause before the first retry, doubled for each later one, with jitter (each pause is a random time between half and all of it) [default: 1s]'
            cand --max-runtime 'Stop the command (its whole tree) after it ran this long: SIGTERM, then SIGKILL after --kill-after; exit 124 (what timeout(1) does; systemd''s RuntimeMaxSec)'
            cand --leftovers 'When the command exits but processes it started still run: keep the lock until the last one has exited (wait), or stop them all (kill: SIGTERM, then SIGKILL after --kill-after) and then release'
            cand --jitter 'Sleep a random time in [0, DURATION) before the first attempt'
            cand --replicas 'Count a node''s write (the lock, each extension, the fencing token) only once N of its replicas acknowledged it (WAIT N within --node-timeout), so that a failover to one of them keeps the lock'
            cand --restart-grace 'A node up for less than this gives no vote: restarted, it may have forgotten a lock that is still held (Redlock''s delayed restart). Not for a node that writes every change to disk first (appendonly yes, appendfsync always); 0 trusts every node. Keep it at least the longest --ttl any run of the lock uses [default: the TTL]'
            cand --limit 'Let up to N holders run at once (a semaphore of N slots); the command gets REDLOCK_SLOT. Plain runs of the name are kept out while a slot is held, and a run that asks for another N than the holders is refused (64)'
            cand -E 'Exit status when the lock is held elsewhere'
            cand --busy-exit-code 'Exit status when the lock is held elsewhere'
            cand -c 'Run STRING with /bin/sh -c instead of a command given after --'
            cand --command 'Run STRING with /bin/sh -c instead of a command given after --'
            cand --log-format 'Log lines on stderr as text, or as one JSON object per line'
            cand --record-command 'What the holder record (shown by status on every host, readable by anyone who can read the nodes) keeps of the command: name (the program''s name only: `report.sh`, or `/bin/sh -c pg_dump …` for -c) or masked (the command line with what looks like a credential masked, cut to 200 characters)'
            cand --report 'Write a JSON summary of the run to FILE when it ends (busy, lost and timed-out runs too)'
            cand --metrics-file 'Record the run in FILE, a node_exporter textfile-collector file shared by every run and key on the host: runs by outcome, how many nodes answered and failed, and the last run''s start, duration, exit status and success time'
            cand --ping 'Ping URL (the healthchecks.io protocol) for the run that takes the lock: URL/start when the command starts, URL/0 or URL/<status> when the run ends (a POST with a summary), URL/fail when fewer than a quorum answered; a run that finds the lock busy sends nothing. Its path is a secret: logs show URL/***'
            cand --ping-timeout 'The time each ping may take, its tries included, and --on-failure too; never spent while the lock is held'
            cand --on-failure 'Run CMD with /bin/sh -c after a run that took the lock and failed, or that could not take it (69), once the lock is released; it gets REDLOCK_KEY, REDLOCK_OUTCOME, REDLOCK_EXIT_STATUS and REDLOCK_RUN_ID, and is killed after --ping-timeout'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --wait-unfair 'Do not queue: race every other contender for the lock whenever it is released (woken together), and take it even when waiters are queued'
            cand -s 'Take the lock as a reader: readers run together; a run without --shared (a writer) runs alone, with no reader and no other writer (flock -s, across hosts). A waiting writer is not overtaken by readers that come after it. Not with --limit or --fence'
            cand --shared 'Take the lock as a reader: readers run together; a run without --shared (a writer) runs alone, with no reader and no other writer (flock -s, across hosts). A waiting writer is not overtaken by readers that come after it. Not with --limit or --fence'
            cand --fence 'Give the command REDLOCK_FENCING_TOKEN, a number greater than every earlier holder''s'
            cand --durable 'Count a node''s vote (the lock, each extension) only once the node has it on disk: WAITAOF where the server has it (Redis 7.2, Valkey), else appendfsync always; a node that can prove neither gives no vote'
            cand -q 'Print nothing when the lock is busy (cron mails any output)'
            cand --quiet 'Print nothing when the lock is busy (cron mails any output)'
            cand -v 'Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv releases, backoff and each signal sent to the command (and when, against the lock''s deadline) too'
            cand --verbose 'Say more on stderr: -v each attempt node by node, heartbeats, decisions and waits; -vv releases, backoff and each signal sent to the command (and when, against the lock''s deadline) too'
            cand --ping-busy 'With --ping: a run that finds the lock busy (or its --once-per window used) sends URL/log saying who holds it'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand status 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)'
            cand unlock 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown'
            cand history 'Show the lock''s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered'
            cand forget 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown'
            cand check 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses'
            cand config 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'redlock-run;status'= {
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand --limit 'Show the N slots of a lock taken with --limit N (found by itself when a holder recorded N); exit 0 while a slot is free'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --json 'Print one JSON object instead of text'
            cand --keys 'Also list, node by node, every key of the lock that exists there (name, type, time left), found as forget finds them'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;unlock'= {
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand --token 'Delete only where the lock holds this token (the REDLOCK_TOKEN of a holder that is gone), or a token starting with it (at least the 8 characters status shows)'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --force 'Delete whatever holds the lock, after printing who held it'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;history'= {
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand -n 'Show the COUNT most recent runs'
            cand --count 'Show the COUNT most recent runs'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --json 'Print one JSON array of runs instead of a table'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;forget'= {
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --force 'Remove the keys even while the lock is held or waiters are queued, the lock''s own key too, after printing who held it (a holder still running stops its command at its next heartbeat)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;check'= {
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand -w 'Probe as a waiter with this --wait: the queue''s commands and SUBSCRIBE too (nothing is waited for)'
            cand --wait 'Probe as a waiter with this --wait: the queue''s commands and SUBSCRIBE too (nothing is waited for)'
            cand --limit 'Probe as a holder of one of N slots (--limit N)'
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --fence 'Probe as a run with --fence: the fence counter''s commands too'
            cand -s 'Probe as a --shared reader'
            cand --shared 'Probe as a --shared reader'
            cand --json 'Print one JSON object instead of text'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;config'= {
            cand --prefix 'Prefix put before the lock name to form the Redis key'
            cand -r 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --redis 'Redis node URL: redis://, rediss://, unix://, redis+cluster://HOST:PORT,HOST:PORT... (a whole Cluster) or redis+sentinel://HOST:PORT,.../MASTER (a Sentinel group''s primary); repeat it or separate with commas for a Redlock quorum of N nodes [default: redis://127.0.0.1:6379]'
            cand --node-timeout 'Bound on connecting, reading and writing to one node [default: TTL/20 within 50ms..1s; 1s for status, unlock, history and forget]'
            cand --password-file 'Read the password for nodes whose URL has none from FILE (or set REDLOCK_PASSWORD; REDLOCK_USERNAME names an ACL user)'
            cand --sentinel-password-file 'Read the password of the sentinels of redis+sentinel:// nodes from FILE (or set REDLOCK_SENTINEL_PASSWORD; REDLOCK_SENTINEL_USERNAME names an ACL user); without it sentinels are sent no password'
            cand --tls-ca 'Trust this CA (PEM) for rediss:// nodes instead of the system roots'
            cand --tls-cert 'Client certificate (PEM) for rediss:// nodes that require one; needs --tls-key'
            cand --tls-key 'Private key (PEM) of --tls-cert'
            cand --config 'Read settings from FILE (TOML, keys named as these options) instead of the first found of $REDLOCK_CONFIG, ~/.config/redlock-run/config.toml, /etc/redlock-run/config.toml; flags and their variables win over it'
            cand -k 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --key 'Name of the lock; the Redis key is <PREFIX><NAME>, printable ASCII without ''{'' or ''}'' (they name the lock''s helper keys, {<PREFIX><NAME>}:fence and the like)'
            cand --tls-insecure 'Do not check rediss:// certificates or host names (warns on every run)'
            cand --no-config 'Read no configuration file'
            cand --json 'Print one JSON object instead of text'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'redlock-run;help'= {
            cand status 'Show the lock on every node (holder, token prefix, TTL left) and a verdict; exit 0 free, 1 held, 69 unknown (fewer than a quorum answered)'
            cand unlock 'Delete the lock on every node: only where it holds --token, or whatever holds it with --force; exit 0 removed, 1 another token holds it, 3 no such lock, 69 unknown'
            cand history 'Show the lock''s last runs, newest first, merged from every node: host, pid, start, duration, outcome, exit status, attempts; exit 0, 69 when fewer than a quorum answered'
            cand forget 'Remove every key of a lock no longer used, on every node: fence counter, history, once-per markers, queue, slots, holder records (the lock itself only with --force); exit 0 removed, 1 in use, 3 nothing to remove, 69 unknown'
            cand check 'Judge every node against what the lock rests on (a master, independent, persistent, noeviction, its clock, the ACL by a probe under a reserved name, TLS expiry), one line per finding with its advice, and what a run refuses up front (a file it cannot write); exit 0 fit, 1 warnings only, 69 a node unfit or no quorum, 64 settings every run refuses'
            cand config 'Print every setting a run takes and where it comes from: a flag, a variable, the configuration file (FILE:LINE) or the default; passwords hidden; exit 0, 64 when a run would refuse them (the file, a value, a file it cannot write)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'redlock-run;help;status'= {
        }
        &'redlock-run;help;unlock'= {
        }
        &'redlock-run;help;history'= {
        }
        &'redlock-run;help;forget'= {
        }
        &'redlock-run;help;check'= {
        }
        &'redlock-run;help;config'= {
        }
        &'redlock-run;help;help'= {
        }
    ]
    $completions[$command]
}
