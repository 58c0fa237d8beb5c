package daemon

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// render writes an effect as one stable line for transcripts. Times are
// shown relative to the step's time (timers) or as epoch seconds (wire).
func render(e Effect, now time.Time) string {
	switch e := e.(type) {
	case SendHello:
		r := e.Request
		line := fmt.Sprintf("send-hello machine_id=%s label=%q tags=%s lanes=%s runners=%s max_invocations=%d workdir=%s protocol=%s daemon=%s",
			r.MachineID, r.Label, list(r.Tags), list(r.Lanes), list(r.Capabilities.Runners),
			r.Capabilities.MaxInvocations, r.Capabilities.Workdir, deref(r.Versions.Protocol), deref(r.Versions.Daemon))
		if len(r.Extensions) > 0 {
			line += " extensions=" + list(r.Extensions)
		}
		if r.Cursor != nil {
			line += " cursor=" + *r.Cursor
		}
		return line
	case SendPoll:
		r := e.Request
		var invs []string
		for _, s := range r.Invocations {
			exit := "null"
			if s.ExitCode != nil {
				exit = strconv.FormatInt(int64(*s.ExitCode), 10)
			}
			invs = append(invs, fmt.Sprintf("%s:%s@%s:exit=%s:tail=%q", s.InvocationID, s.State,
				strconv.FormatFloat(float64(s.StartedAt), 'f', -1, 64), exit, s.StdoutTail))
		}
		line := fmt.Sprintf("send-poll seq=%d worker_id=%s queue=%s timeout_s=%g cursor=%s invocations=%s",
			e.Seq, r.WorkerID, r.Queue, float64(r.TimeoutS), deref(r.Cursor), list(invs))
		if c := r.UpdatedCapabilities; c != nil {
			line += fmt.Sprintf(" updated_capabilities=runners:%s,max:%d", list(c.Runners), c.MaxInvocations)
		}
		if r.Full {
			line += " full"
		}
		if r.CapabilitiesGen != 0 {
			line += fmt.Sprintf(" capabilities_gen=%d", r.CapabilitiesGen)
		}
		return line
	case CancelPoll:
		if e.KeepReply {
			return fmt.Sprintf("cancel-poll seq=%d keep-reply", e.Seq)
		}
		return fmt.Sprintf("cancel-poll seq=%d", e.Seq)
	case StartExec:
		return fmt.Sprintf("start-exec cmd=%s exec_id=%s command=%q", e.CommandID, e.Exec.ExecID, e.Exec.Command)
	case StartRun:
		return fmt.Sprintf("start-run cmd=%s invocation_id=%s kind=%s", e.CommandID, e.Run.InvocationID, e.Kind)
	case StartSetup:
		r := e.Run
		return fmt.Sprintf("start-setup cmd=%s invocation_id=%s module=%s qualname=%s runner=%s as_user=%s script=%q workdir=%s",
			e.CommandID, r.InvocationID, r.Function.Module, r.Function.Qualname, r.RunConfig.Runner, deref(r.AsUser), deref(r.Script), e.Workdir)
	case CancelInFlight:
		return "cancel-in-flight"
	case PostExecResult:
		return fmt.Sprintf("post-exec-result exec_id=%s exit_code=%d stdout=%q error=%s", e.ExecID, e.Result.ExitCode, e.Result.Stdout, quotedPtr(e.Result.Error))
	case PostAck:
		a := e.Ack
		errText := "null"
		if a.Error != nil {
			errText = fmt.Sprintf("{type:%s message:%q}", a.Error.TypeName, a.Error.Message)
		}
		return fmt.Sprintf("post-ack invocation_id=%s state=%s result_blob=%q error=%s worker_id=%s", a.InvocationID, a.State, []byte(a.ResultBlob), errText, a.WorkerID)
	case SetTimer:
		return fmt.Sprintf("set-timer %s in=%s", e.ID, e.At.Sub(now))
	case CancelTimer:
		return fmt.Sprintf("cancel-timer %s", e.ID)
	case ReportState:
		return "state " + e.State
	case Log:
		var b strings.Builder
		fmt.Fprintf(&b, "log %s %q", strings.ToLower(e.Level.String()), e.Msg)
		for _, a := range e.Attrs {
			fmt.Fprintf(&b, " %s=%s", a.Key, attrValue(a))
		}
		return b.String()
	case RefreshCapabilities:
		return "refresh-capabilities cmd=" + e.CommandID
	case StartOTA:
		return fmt.Sprintf("start-ota cmd=%s version=%s sha256=%s", e.CommandID, e.Update.Version, e.Update.SHA256)
	case SetLogLevel:
		return "set-log-level " + string(e.Level)
	case PersistDelivery:
		return fmt.Sprintf("persist-delivery cursor=%d applied=%s", e.Cursor, list(e.Applied))
	case CancelWork:
		return fmt.Sprintf("cancel-work exec_id=%s invocation_id=%s", e.ExecID, e.InvocationID)
	case NotifyDraining:
		return fmt.Sprintf("notify-draining worker_id=%s timeout_s=%g draining=%v", e.Request.WorkerID, float64(e.Request.TimeoutS), e.Request.Draining)
	case ApplyOTA:
		return fmt.Sprintf("apply-ota cmd=%s version=%s", e.CommandID, e.Version)
	case DiscardOTA:
		return fmt.Sprintf("discard-ota cmd=%s", e.CommandID)
	case RotateKey:
		return "rotate-key cmd=" + e.CommandID
	case Exit:
		return fmt.Sprintf("exit %d %q", e.Code, e.Reason)
	}
	return fmt.Sprintf("unrendered %T", e)
}

func renderStatus(s Status, now time.Time) string {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return "+" + t.Sub(epoch).String()
	}
	return fmt.Sprintf("state=%s worker_id=%s queue=%s execs=%d runs=%d held=%d setups_queued=%d setup_running=%t posts_pending=%d permits_free=%d backoff_base_s=%g last_poll=%s last_poll_ok=%s\n"+
		"counters hellos=%d hello_errors=%d polls=%d poll_errors=%d commands=%d skipped=%d execs_started=%d runs_started=%d runs_done=%d setups=%d exec_ok=%d exec_nonzero=%d exec_timeout=%d exec_failed=%d",
		s.State, s.WorkerID, s.Queue, s.ExecsRunning, s.RunsRunning, s.Held, s.SetupsQueued, s.SetupRunning, s.PostsPending, s.PermitsFree,
		s.BackoffBaseS, since(s.LastPollAt), since(s.LastPollOKAt),
		s.Counters.Hellos, s.Counters.HelloErrors, s.Counters.Polls, s.Counters.PollErrors, s.Counters.Commands, s.Counters.Skipped,
		s.Counters.ExecsStarted, s.Counters.RunsStarted, s.Counters.RunsDone, s.Counters.Setups,
		s.Counters.ExecsOK, s.Counters.ExecsNonZero, s.Counters.ExecsTimedOut, s.Counters.ExecsFailed)
}

func attrValue(a slog.Attr) string {
	if a.Value.Kind() == slog.KindString {
		s := a.Value.String()
		if s == "" || strings.ContainsAny(s, " \"=") {
			return strconv.Quote(s)
		}
		return s
	}
	return a.Value.String()
}

func list(xs []string) string { return "[" + strings.Join(xs, ",") + "]" }

func deref(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func quotedPtr(p *string) string {
	if p == nil {
		return "null"
	}
	return strconv.Quote(*p)
}
