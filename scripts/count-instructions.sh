#!/usr/bin/env bash
# Counts the instructions (callgrind's Ir) of one examples/count.rs run: the
# client's, or the PostgreSQL backends' that served its measured part.
# Deterministic enough to compare two builds on a busy machine where timing
# is not (docs/benchmarks.md, "Issue 14: instruction counts").
#
#   scripts/count-instructions.sh init DIR PORT            # a private cluster
#   scripts/count-instructions.sh client BIN A 2000        # client under callgrind
#   scripts/count-instructions.sh server DIR BIN C 4000 500
#
# Run as root (the cluster runs as postgres); needs valgrind. `init` leaves
# the cluster running natively, which `client` can use; `server` restarts it
# under callgrind and stops it at the end.
# BIN is a release build of examples/count.rs; the rest are its arguments.
# DATABASE_URL names the cluster (count.rs's default: port 5432).
# `client` runs BIN under callgrind (the cluster runs natively) and prints the
# Ir between count.rs's last two marks (its second dump).
# `server` starts DIR's cluster under callgrind (every backend is a forked
# child, counted in a file of its own, from its PostgresMain on: not the
# postmaster's work it inherits), runs BIN natively with COUNT_MARKS
# set, sums the Ir of every backend started after BIN's first mark (the
# measured part runs on connections opened after it) and stops the cluster;
# it also prints pg_stat_statements' totals between the two marks.
# Instructions per job: two job counts, difference over difference (fixed
# costs such as connecting and a worker's start cancel out).
set -euo pipefail
PGBIN=/usr/lib/postgresql/15/bin
summary() { (($#)) || set -- /dev/null; cat "$@" | awk '/^summary:/ {s += $2} END {print s + 0}'; }

case $1 in
init)
	dir=$2 port=$3
	rm -rf "$dir"; mkdir -p "$dir"; chown postgres "$dir"
	su postgres -c "$PGBIN/initdb -D $dir/data -A trust -U postgres --no-sync" >/dev/null
	cat >>"$dir/data/postgresql.conf" <<-EOF
		port = $port
		listen_addresses = '127.0.0.1'
		unix_socket_directories = '$dir'
		fsync = off
		autovacuum = off
		jit = off
		shared_buffers = 128MB
		max_wal_size = 1GB
		update_process_title = off
		shared_preload_libraries = 'pg_stat_statements'
	EOF
	su postgres -c "$PGBIN/pg_ctl -D $dir/data -l $dir/log -w start" >/dev/null
	psql -q -h 127.0.0.1 -p "$port" -U postgres -c 'CREATE EXTENSION pg_stat_statements'
	;;
client)
	shift; bin=$1; shift
	out=$(mktemp -d); valgrind -q --tool=callgrind --callgrind-out-file="$out/cg.%p" "$bin" "$@"
	echo "client_ir $(summary "$out"/cg.*.2)"; rm -rf "$out" ;;
server)
	dir=$2 bin=$3; shift 3
	export PGHOST=$dir PGUSER=postgres PGPORT
	PGPORT=$(awk '/^port/ {print $3}' "$dir/data/postgresql.conf" | tail -1)
	cg=$dir/cg; rm -rf "$cg" || rm -rf "$cg"; mkdir "$cg"; chown postgres "$cg"
	su postgres -c "$PGBIN/pg_ctl -D $dir/data -m fast -w stop" >/dev/null 2>&1 || true
	su postgres -c "valgrind -q --vgdb=no --tool=callgrind \
		--collect-atstart=no --toggle-collect=PostgresMain --callgrind-out-file=$cg/srv.%p \
		$PGBIN/postgres -D $dir/data" >>"$dir/log" 2>&1 &
	until $PGBIN/pg_isready -q; do sleep 1; done
	psql -q -c 'SELECT pg_stat_statements_reset()' >/dev/null
	pm=$(head -1 "$dir/data/postmaster.pid")
	coproc COUNT { COUNT_MARKS=1 "$bin" "$@" 2>&1; }
	cpid=$COUNT_PID
	for step in start end; do
		read -r line <&"${COUNT[0]}"
		until [[ $line == "count: mark" ]]; do echo "$line"; read -r line <&"${COUNT[0]}"; done
		if [[ $step == start ]]; then
			old=" $pm $(pgrep -P "$pm" | tr '\n' ' ')" pre=" $(ls "$cg" | tr '\n' ' ')"
			psql -qAt -c 'SELECT pg_stat_statements_reset()' >/dev/null
		else
			psql -qAt -c "SELECT sum(calls), sum(rows),
				sum(shared_blks_hit + shared_blks_read), sum(wal_bytes) FROM pg_stat_statements
				WHERE query NOT LIKE '%pg_stat_statements%'" |
				awk -F'|' '{print "statements", $1, "rows", $2, "blocks", $3, "wal_bytes", $4}'
		fi
		echo >&"${COUNT[1]}"
	done
	cat <&"${COUNT[0]}"; wait "$cpid" || true
	# Backends write their file when they exit; wait for those still going.
	while pgrep -P "$pm" | grep -qvxFf <(tr ' ' '\n' <<<"$old" | grep .); do sleep 1; done
	files=()
	for f in "$cg"/srv.*; do
		p=${f##*/srv.}; [[ $old == *" $p "* || $pre == *" srv.$p "* ]] || files+=("$f")
	done
	# count.rs's probe (the only backend asked for the WAL position) polls
	# for the end at a rate set by the clock: reported apart.
	probe=$(grep -l pg_current_wal_lsn "${files[@]}" || true)
	echo "server_ir $(summary "${files[@]}") backends ${#files[@]} probe_ir $(summary $probe)"
	su postgres -c "$PGBIN/pg_ctl -D $dir/data -m fast -w stop" >/dev/null ;;
esac
