package wire_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nymphd/nymph/wirecore/wire"
	"github.com/tinylib/msgp/msgp"
)

func validHello() wire.HelloRequest {
	one, kernel := "1", "Linux 6.8.0"
	cuda := "12.4"
	return wire.HelloRequest{MachineID: "gpu-node-07", Label: "lab gpu 7", Tags: []string{"region=eu-west"},
		Lanes:        []string{"default", "gpu*"},
		Capabilities: wire.Capabilities{Runners: []string{"process"}, Workdir: "/var/lib/nymph/work"},
		Versions: wire.Versions{Daemon: &one, Protocol: &one, Kernel: &kernel, CPU: &wire.CPU{Model: "EPYC"},
			GPU: []wire.GPU{{Name: "A100", Driver: "550", CUDA: &cuda}}}}
}

func strs(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func gpus(n int) []wire.GPU {
	return make([]wire.GPU, n)
}

func ptr(s string) *string { return &s }

// limitCase changes a valid message; want is the refusal's error code,
// "" when the change is still accepted.
type limitCase struct {
	name       string
	change     func(*wire.HelloRequest)
	want, path string
}

// Every limit is tested on both sides: exactly at it accepted, one past
// it refused, naming the field.
func TestHelloLimitsBothSidesOfEachBoundary(t *testing.T) {
	id := func(n int) string { return strings.Repeat("a", n) }
	text := func(n int) string { return strings.Repeat("é", n/2) + strings.Repeat("x", n%2) } // multi-byte: limits count bytes
	cases := []limitCase{
		{"machine_id at the limit", func(h *wire.HelloRequest) { h.MachineID = id(wire.MaxIDBytes) }, "", ""},
		{"machine_id one past", func(h *wire.HelloRequest) { h.MachineID = id(wire.MaxIDBytes + 1) }, wire.InvalidTooLong, "machine_id"},
		{"machine_id of 900 KB", func(h *wire.HelloRequest) { h.MachineID = id(900 << 10) }, wire.InvalidTooLong, "machine_id"},
		{"machine_id empty", func(h *wire.HelloRequest) { h.MachineID = "" }, wire.InvalidEmpty, "machine_id"},
		{"machine_id of every id byte", func(h *wire.HelloRequest) { h.MachineID = "Az09" + wire.IDChars }, "", ""},
		{"machine_id with a slash", func(h *wire.HelloRequest) { h.MachineID = "a/b" }, wire.InvalidCharacter, "machine_id"},
		{"machine_id with a space", func(h *wire.HelloRequest) { h.MachineID = "a b" }, wire.InvalidCharacter, "machine_id"},
		{"machine_id not ASCII", func(h *wire.HelloRequest) { h.MachineID = "hôte" }, wire.InvalidCharacter, "machine_id"},

		{"label at the limit", func(h *wire.HelloRequest) { h.Label = text(wire.MaxLabelBytes) }, "", ""},
		{"label one past", func(h *wire.HelloRequest) { h.Label = text(wire.MaxLabelBytes + 1) }, wire.InvalidTooLong, "label"},
		{"label empty", func(h *wire.HelloRequest) { h.Label = "" }, "", ""},
		{"label of invalid UTF-8", func(h *wire.HelloRequest) { h.Label = "lab\xff7" }, wire.InvalidUTF8, "label"},
		{"label holding U+FFFD itself", func(h *wire.HelloRequest) { h.Label = "lab \uFFFD" }, "", ""},
		{"label with a terminal escape", func(h *wire.HelloRequest) { h.Label = "\x1b]0;pwned\x07" }, wire.InvalidControlChar, "label"},
		{"label with a C1 control", func(h *wire.HelloRequest) { h.Label = "a\u009bb" }, wire.InvalidControlChar, "label"},

		{"tags at the count limit", func(h *wire.HelloRequest) { h.Tags = strs(wire.MaxTags, "k=v") }, "", ""},
		{"tags one past the count", func(h *wire.HelloRequest) { h.Tags = strs(wire.MaxTags+1, "k=v") }, wire.InvalidTooMany, "tags"},
		{"tag at the length limit", func(h *wire.HelloRequest) { h.Tags = []string{text(wire.MaxTagBytes)} }, "", ""},
		{"tag one past the length", func(h *wire.HelloRequest) { h.Tags = []string{"ok", text(wire.MaxTagBytes + 1)} }, wire.InvalidTooLong, "tags"},
		{"tag of invalid UTF-8", func(h *wire.HelloRequest) { h.Tags = []string{"k=\xc3"} }, wire.InvalidUTF8, "tags"},
		{"tag with a newline", func(h *wire.HelloRequest) { h.Tags = []string{"k=v\nw"} }, wire.InvalidControlChar, "tags"},

		{"lanes at the count limit", func(h *wire.HelloRequest) { h.Lanes = strs(wire.MaxLanes, "q") }, "", ""},
		{"lanes one past the count", func(h *wire.HelloRequest) { h.Lanes = strs(wire.MaxLanes+1, "q") }, wire.InvalidTooMany, "lanes"},
		{"lane at the length limit", func(h *wire.HelloRequest) { h.Lanes = []string{text(wire.MaxQueueBytes)} }, "", ""},
		{"lane one past the length", func(h *wire.HelloRequest) { h.Lanes = []string{text(wire.MaxQueueBytes + 1)} }, wire.InvalidTooLong, "lanes"},

		{"runners at the count limit", func(h *wire.HelloRequest) { h.Capabilities.Runners = strs(wire.MaxRunners, "process") }, "", ""},
		{"runners one past the count", func(h *wire.HelloRequest) { h.Capabilities.Runners = strs(wire.MaxRunners+1, "process") }, wire.InvalidTooMany, "capabilities.runners"},
		{"runner one past the length", func(h *wire.HelloRequest) { h.Capabilities.Runners = []string{text(wire.MaxNameBytes + 1)} }, wire.InvalidTooLong, "capabilities.runners"},
		{"workdir at the limit", func(h *wire.HelloRequest) { h.Capabilities.Workdir = text(wire.MaxPathBytes) }, "", ""},
		{"workdir one past", func(h *wire.HelloRequest) { h.Capabilities.Workdir = text(wire.MaxPathBytes + 1) }, wire.InvalidTooLong, "capabilities.workdir"},

		{"a version at the limit", func(h *wire.HelloRequest) { h.Versions.Kernel = ptr(text(wire.MaxNameBytes)) }, "", ""},
		{"a version one past", func(h *wire.HelloRequest) { h.Versions.Kernel = ptr(text(wire.MaxNameBytes + 1)) }, wire.InvalidTooLong, "versions.kernel"},
		{"protocol one past", func(h *wire.HelloRequest) { h.Versions.Protocol = ptr(text(wire.MaxNameBytes + 1)) }, wire.InvalidTooLong, "versions.protocol"},
		{"cpu model one past", func(h *wire.HelloRequest) { h.Versions.CPU.Model = text(wire.MaxNameBytes + 1) }, wire.InvalidTooLong, "versions.cpu.model"},
		{"gpus at the count limit", func(h *wire.HelloRequest) { h.Versions.GPU = gpus(wire.MaxGPUs) }, "", ""},
		{"gpus one past the count", func(h *wire.HelloRequest) { h.Versions.GPU = gpus(wire.MaxGPUs + 1) }, wire.InvalidTooMany, "versions.gpu"},
		{"gpu name one past", func(h *wire.HelloRequest) { h.Versions.GPU[0].Name = text(wire.MaxNameBytes + 1) }, wire.InvalidTooLong, "versions.gpu.name"},
		{"cuda one past", func(h *wire.HelloRequest) { h.Versions.GPU[0].CUDA = ptr(text(wire.MaxNameBytes + 1)) }, wire.InvalidTooLong, "versions.gpu.cuda"},
		{"public key one past", func(h *wire.HelloRequest) { h.PublicKey = ptr(text(wire.MaxNameBytes + 1)) }, wire.InvalidTooLong, "public_key"},
	}
	for _, c := range cases {
		h := validHello()
		c.change(&h)
		checkRefusal(t, c.name, h.Validate(), c.want, c.path)
	}
	if v := validHello(); v.Validate() != nil {
		t.Fatalf("the valid hello is refused: %+v", v.Validate())
	}
}

func checkRefusal(t *testing.T, name string, got *wire.ValidationError, want, path string) {
	t.Helper()
	switch {
	case want == "" && got != nil:
		t.Errorf("%s: refused %+v, want accepted", name, *got)
	case want == "":
	case got == nil:
		t.Errorf("%s: accepted, want %s on %s", name, want, path)
	case got.Error != want || got.Field != path:
		t.Errorf("%s: refused {%s %s}, want {%s %s}", name, got.Error, got.Field, want, path)
	case !strings.HasPrefix(got.Message, path+": ") || len(got.Message) > 200:
		t.Errorf("%s: message %q should name the field and be short", name, got.Message)
	}
}

func TestPollAndAckLimitsBothSidesOfEachBoundary(t *testing.T) {
	provisional := strings.Repeat("m", wire.MaxIDBytes) + "-01KBX3Z8Q0P4N7RJ2C5V6W9Y0Z"
	polls := []struct {
		name       string
		poll       wire.PollRequest
		want, path string
	}{
		{"provisional worker id of the longest machine_id", wire.PollRequest{WorkerID: provisional}, "", ""},
		{"worker id one past", wire.PollRequest{WorkerID: provisional + "x"}, wire.InvalidTooLong, "worker_id"},
		{"worker id empty", wire.PollRequest{}, wire.InvalidEmpty, "worker_id"},
		{"queue at the limit", wire.PollRequest{WorkerID: "w", Queue: strings.Repeat("q", wire.MaxQueueBytes)}, "", ""},
		{"queue one past", wire.PollRequest{WorkerID: "w", Queue: strings.Repeat("q", wire.MaxQueueBytes+1)}, wire.InvalidTooLong, "queue"},
		{"invocation id at the limit", wire.PollRequest{WorkerID: "w", Invocations: []wire.InvocationStatus{
			{InvocationID: strings.Repeat("i", wire.MaxIDBytes), State: "running"}}}, "", ""},
		{"invocation id one past", wire.PollRequest{WorkerID: "w", Invocations: []wire.InvocationStatus{
			{InvocationID: "ok", State: "running"}, {InvocationID: strings.Repeat("i", wire.MaxIDBytes+1)}}}, wire.InvalidTooLong, "invocations.invocation_id"},
		{"updated runners one past the count", wire.PollRequest{WorkerID: "w", UpdatedCapabilities: &wire.Capabilities{
			Runners: strs(wire.MaxRunners+1, "p")}}, wire.InvalidTooMany, "updated_capabilities.runners"},
	}
	for _, c := range polls {
		checkRefusal(t, c.name, c.poll.Validate(), c.want, c.path)
	}
	acks := []struct {
		name       string
		ack        wire.Ack
		want, path string
	}{
		{"setup ack", wire.Ack{InvocationID: "setup-01KBX3Z8Q0P4N7RJ2C5V6W9Y0Z", State: "succeeded"}, "", ""},
		{"invocation id at the limit", wire.Ack{InvocationID: strings.Repeat("i", wire.MaxIDBytes)}, "", ""},
		{"invocation id one past", wire.Ack{InvocationID: strings.Repeat("i", wire.MaxIDBytes+1)}, wire.InvalidTooLong, "invocation_id"},
		{"invocation id with a NUL", wire.Ack{InvocationID: "inv\x00"}, wire.InvalidCharacter, "invocation_id"},
		{"worker id one past", wire.Ack{InvocationID: "i", WorkerID: strings.Repeat("w", wire.MaxWorkerIDBytes+1)}, wire.InvalidTooLong, "worker_id"},
		{"error type one past", wire.Ack{InvocationID: "i", Error: &wire.ErrorInfo{TypeName: strings.Repeat("E", wire.MaxNameBytes+1)}}, wire.InvalidTooLong, "error.type"},
		{"a long error message is kept", wire.Ack{InvocationID: "i", Error: &wire.ErrorInfo{TypeName: "ValueError",
			Message: strings.Repeat("m", 1<<20), Traceback: ptr(strings.Repeat("t", 4<<20))}}, "", ""},
		{"a large result blob is kept", wire.Ack{InvocationID: "i", ResultBlob: make(wire.SharedBlob, 8<<20)}, "", ""},
	}
	for _, c := range acks {
		checkRefusal(t, c.name, c.ack.Validate(), c.want, c.path)
	}
}

func TestIDLimitAndCharset(t *testing.T) {
	for c := 0; c < 256; c++ {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(wire.IDChars, byte(c)) >= 0
		got := wire.CheckID("exec_id", string([]byte{byte(c)}), wire.MaxIDBytes)
		if ok != (got == nil) {
			t.Errorf("id byte %q: refusal %+v, want accepted=%v", byte(c), got, ok)
		}
	}
	if got := wire.CheckID("exec_id", strings.Repeat("0", wire.MaxIDBytes), wire.MaxIDBytes); got != nil {
		t.Errorf("an id at the limit is refused: %+v", got)
	}
	if got := wire.CheckID("exec_id", strings.Repeat("0", wire.MaxIDBytes+1), wire.MaxIDBytes); got == nil || got.Error != wire.InvalidTooLong {
		t.Errorf("an id one past the limit: %+v, want too_long", got)
	}
}

// The generated decoders refuse a collection announcing one entry more
// than MaxCollectionEntries, and read one of exactly that many: the
// //msgp:limit directives and the constant agree.
func TestCollectionLimitIsTheGeneratedOne(t *testing.T) {
	tags := func(n uint32) []byte {
		b := msgp.AppendMapHeader(nil, 1)
		b = msgp.AppendString(b, "tags")
		b = msgp.AppendArrayHeader(b, n)
		for range n {
			b = msgp.AppendString(b, "")
		}
		return b
	}
	var h wire.HelloRequest
	if _, err := h.UnmarshalMsg(tags(wire.MaxCollectionEntries)); err != nil || len(h.Tags) != wire.MaxCollectionEntries {
		t.Fatalf("%d tags: %v (%d read), want them read", wire.MaxCollectionEntries, err, len(h.Tags))
	}
	if _, err := new(wire.HelloRequest).UnmarshalMsg(tags(wire.MaxCollectionEntries + 1)); !errors.Is(err, msgp.ErrLimitExceeded) {
		t.Fatalf("%d tags: %v, want %v", wire.MaxCollectionEntries+1, err, msgp.ErrLimitExceeded)
	}
}

func TestBodyDeadlineGrowsWithTheBody(t *testing.T) {
	for _, c := range []struct {
		announced int64
		want      time.Duration
	}{
		{0, wire.BodyTimeout},
		{-1, wire.BodyTimeout},
		{wire.BodyBytesPerSecond, wire.BodyTimeout + time.Second},
		{wire.MaxResultBodyBytes, wire.BodyTimeout + 128*time.Second},
	} {
		if got := wire.BodyDeadline(wire.BodyTimeout, c.announced); got != c.want {
			t.Errorf("BodyDeadline(%d) = %s, want %s", c.announced, got, c.want)
		}
	}
}

// Probe output of several lines (runsc --version prints two) becomes one
// line and then validates; a value without control characters is left
// as it is, and so is what the pointers shared with the caller point at.
func TestVersionsTidy(t *testing.T) {
	runsc := "runsc version release-20240513.0\nspec: 1.1.0\n"
	model := "Intel(R) Xeon(R)\tCPU"
	cuda := "12.4\r\n"
	h := validHello()
	v := &h.Versions
	v.Runsc, v.CPU, v.GPU = &runsc, &wire.CPU{Model: model, Cores: 2}, []wire.GPU{{Name: "A100\n", Driver: "550", CUDA: &cuda}}
	kernel, shared := v.Kernel, *v
	if bad := h.Validate(); bad == nil {
		t.Fatal("untidied versions validated")
	}
	v.Tidy()
	if *v.Runsc != "runsc version release-20240513.0 spec: 1.1.0" || v.CPU.Model != "Intel(R) Xeon(R) CPU" ||
		v.GPU[0].Name != "A100" || *v.GPU[0].CUDA != "12.4" {
		t.Fatalf("tidied %q %q %q %q", *v.Runsc, v.CPU.Model, v.GPU[0].Name, *v.GPU[0].CUDA)
	}
	if v.Kernel != kernel {
		t.Error("a clean value was replaced")
	}
	if runsc != "runsc version release-20240513.0\nspec: 1.1.0\n" || shared.CPU.Model != model || shared.GPU[0].Name != "A100\n" || cuda != "12.4\r\n" {
		t.Error("Tidy wrote through a pointer or slice it shares")
	}
	if bad := h.Validate(); bad != nil {
		t.Fatalf("tidied versions refused: %+v", bad)
	}
	// Not probe output: protocol and daemon are judged as they came.
	v.Protocol = ptr("1\n")
	v.Tidy()
	if bad := h.Validate(); bad == nil || bad.Field != "versions.protocol" {
		t.Fatalf("a protocol with a newline: %+v", bad)
	}
}

// FitText gives text CheckText takes, changing only what it must.
func TestFitText(t *testing.T) {
	for _, s := range []string{"ValueError", "Value\nError", "a\x07\x1b[2Jb", "bad\xffutf8", strings.Repeat("é", 200), strings.Repeat("x", 300)} {
		got := wire.FitText(s, 256)
		if v := wire.CheckText("f", got, 256); v != nil {
			t.Errorf("FitText(%q) = %q, refused: %+v", s, got, v)
		}
	}
	if got := wire.FitText("ValueError", 256); got != "ValueError" {
		t.Errorf("a fitting text became %q", got)
	}
	if got := wire.FitText("Value\n\tError", 256); got != "Value Error" {
		t.Errorf("control characters: %q", got)
	}
}
