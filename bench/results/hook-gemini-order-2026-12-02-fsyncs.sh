#!/bin/bash
# count fsync/fdatasync per hook event: base vs new, intake binary
set -e
for v in base new; do
  B=/tmp/gembench/bin-$v; mkdir -p $B
  [ -x $B/agentscm-hook-intake ] || (cd /tmp/gem-$v && CGO_ENABLED=0 go build -o $B/agentscm ./cmd/agentscm && CGO_ENABLED=0 go build -o $B/agentscm-hook ./cmd/agentscm-hook && CGO_ENABLED=0 go build -o $B/agentscm-hook-intake ./cmd/agentscm-hook-intake)
done
for v in base new; do
  B=/tmp/gembench/bin-$v
  D=$(mktemp -d /tmp/gemfs-XXXX); R=$D/repo; mkdir -p $R; git -C $R init -q
  export XDG_CONFIG_HOME=$D/xdg HOME=$D/home AGENTSCM_CHANGELOG_WATCH=0
  $B/agentscm client setup --root $R --local >/dev/null
  $B/agentscm change-capture configure --root $R --spool $D/spool >/dev/null
  $B/agentscm work start --root $R --title fs >/dev/null
  for agent in claude codex gemini; do
    for ev in SessionStart BeforeTool AfterTool BeforeTool AfterTool; do
      case $agent:$ev in
        claude:SessionStart) pl='{"session_id":"c1","cwd":"'$R'","hook_event_name":"SessionStart","source":"startup"}';;
        codex:SessionStart) pl='{"session_id":"x1","turn_id":"t","transcript_path":null,"cwd":"'$R'","hook_event_name":"SessionStart","model":"gpt-5","source":"startup"}';;
        gemini:SessionStart) pl='{"session_id":"g1","transcript_path":"","cwd":"'$R'","hook_event_name":"SessionStart","timestamp":"2026-12-02T10:00:00Z","source":"startup"}';;
        gemini:BeforeTool) pl='{"session_id":"g1","transcript_path":"","cwd":"'$R'","hook_event_name":"BeforeTool","timestamp":"2026-12-02T10:00:00Z","tool_name":"read_file","tool_input":{"file_path":"/x"}}';;
        gemini:AfterTool) pl='{"session_id":"g1","transcript_path":"","cwd":"'$R'","hook_event_name":"AfterTool","timestamp":"2026-12-02T10:00:00Z","tool_name":"read_file","tool_input":{"file_path":"/x"},"tool_response":{"llmContent":"ok"}}';;
        *) continue;;
      esac
      n=$(echo "$pl" | strace -f -e trace=fsync,fdatasync,execve $B/agentscm-hook-intake change-capture hook-$agent 2>&1 >/dev/null | awk '/execve\(/{e++} e<2 && /f(data)?sync\(/{c++} END{print c+0}')
      echo "$v $agent $ev fsyncs=$n"
      sleep 1.5
    done
  done
done
