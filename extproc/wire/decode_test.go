package wire

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// envoyMessages are the messages of a metered request as Envoy sends them
// under the shipped configuration (testdata, in protobuf's text format).
func envoyMessages(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/*.txtpb")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v, %d files", err, len(files))
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := &extprocv3.ProcessingRequest{}
		if err := prototext.Unmarshal(text, m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// sameAsProtobuf decodes b by hand and with protobuf, fails t if the two
// differ where Decode accepted it, and reports whether it did.
func sameAsProtobuf(t *testing.T, what string, b []byte) bool {
	t.Helper()
	want := &extprocv3.ProcessingRequest{}
	werr := proto.Unmarshal(b, want)
	got := &extprocv3.ProcessingRequest{}
	ok := Decode(b, got)
	if ok && werr != nil {
		t.Fatalf("%s: decoded what protobuf refuses (%v)", what, werr)
	}
	if ok && !proto.Equal(got, want) {
		t.Fatalf("%s: decoded\n%v\nprotobuf decodes\n%v", what, prototext.Format(got), prototext.Format(want))
	}
	// The codec, declining or not, gives protobuf's answer, also into a
	// Message that received every message before this one.
	viaCodec := &extprocv3.ProcessingRequest{}
	cerr := NewCodec().Unmarshal(split(b), viaCodec)
	if (cerr == nil) != (werr == nil) || (cerr == nil && !proto.Equal(viaCodec, want)) {
		t.Fatalf("%s: codec gave %v, %v; protobuf %v", what, prototext.Format(viaCodec), cerr, werr)
	}
	got2, rerr := reused.Recv(codecReceiver{NewCodec(), b})
	if (rerr == nil) != (werr == nil) || (rerr == nil && !proto.Equal(got2, want)) {
		t.Fatalf("%s: into a reused Message, codec gave %v, %v; protobuf %v", what, prototext.Format(got2), rerr, werr)
	}
	return ok
}

// reused receives every message sameAsProtobuf checks, one after the
// other (the package's tests are not parallel).
var reused = new(Message)

// split is b as grpc may hand it over: in more than one buffer.
func split(b []byte) mem.BufferSlice {
	h := len(b) / 2
	return mem.BufferSlice{mem.SliceBuffer(b[:h]), mem.SliceBuffer(b[h:])}
}

func TestDecodesWhatEnvoySends(t *testing.T) {
	for name, b := range envoyMessages(t) {
		if !sameAsProtobuf(t, name, b) {
			t.Errorf("%s: declined: a metered request's messages must take the fast path", name)
		}
	}
}

func TestCodecCountsHowItDecoded(t *testing.T) {
	c := NewCodec()
	msgs := envoyMessages(t)
	for _, b := range msgs {
		if err := c.Unmarshal(split(b), &extprocv3.ProcessingRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// A message with metadata in it is protobuf's.
	m := &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": {}}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(split(b), &extprocv3.ProcessingRequest{}); err != nil {
		t.Fatal(err)
	}
	if hand, pb := c.Decoded(); hand != uint64(len(msgs)) || pb != 1 {
		t.Fatalf("decoded %d by hand and %d by protobuf, want %d and 1", hand, pb, len(msgs))
	}
}

// The decoder's fields: every field of ProcessingRequest and the messages
// under it is either decoded here or declined, and the test knows which.
// A field a later go-control-plane adds is declined (protobuf decodes it)
// until it is listed here and in decode.go.
var decoded = []string{
	"request_headers", "response_headers",
	"request_headers.headers", "request_headers.headers.headers",
	"request_headers.headers.headers.key", "request_headers.headers.headers.value", "request_headers.headers.headers.raw_value",
	"request_headers.end_of_stream",
	"request_body", "response_body",
	"request_body.body", "request_body.end_of_stream", "request_body.end_of_stream_without_message",
	"request_body.grpc_message_compressed", "request_body.drain_complete",
	"request_trailers", "response_trailers", "request_trailers.trailers",
	"metadata_context", // empty, as Envoy sends it; what it may hold is declined
	"attributes",       // and everything in its structs (inStruct)
	"observability_mode",
	"protocol_config", "protocol_config.request_body_mode", "protocol_config.response_body_mode",
	"protocol_config.send_body_without_waiting_for_header_response",
}

// The paths whose messages the list names once: a response's headers are
// request_headers' type, trailers hold a header map, and so on.
var alias = map[string]string{
	"response_headers.":          "request_headers.",
	"response_body.":             "request_body.",
	"request_trailers.trailers.": "request_headers.headers.",
	"response_trailers.":         "request_trailers.",
}

// canonical is path with its aliased prefixes replaced, until none is left.
func canonical(path string, aliases map[string]string) string {
	for {
		changed := false
		for from, to := range aliases {
			if strings.HasPrefix(path, from) {
				path, changed = to+path[len(from):], true
			}
		}
		if !changed {
			return path
		}
	}
}

// eachField calls visit for each field of root's message type and of every
// message under it (six deep), with the field's path and a new message in
// which that field alone is set (and the messages holding it present).
func eachField[M proto.Message](root func() M, visit func(path string, m M)) {
	var walk func(path string, d protoreflect.MessageDescriptor, set func(func(protoreflect.Message)) M, depth int)
	walk = func(path string, d protoreflect.MessageDescriptor, set func(func(protoreflect.Message)) M, depth int) {
		fields := d.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			p := string(fd.Name())
			if path != "" {
				p = path + "." + p
			}
			visit(p, set(func(m protoreflect.Message) { setLeaf(m, fd) }))
			if msg := message(fd); msg != nil && depth < 6 && !strings.HasPrefix(string(msg.FullName()), "google.protobuf.Any") {
				walk(p, msg, func(leaf func(protoreflect.Message)) M {
					return set(func(m protoreflect.Message) { leaf(child(m, fd)) })
				}, depth+1)
			}
		}
	}
	walk("", root().ProtoReflect().Descriptor(), func(leaf func(protoreflect.Message)) M {
		m := root()
		leaf(m.ProtoReflect())
		return m
	}, 0)
}

// TestEveryFieldIsDecodedOrDeclined sets each field of ProcessingRequest,
// down through every message it holds (google.protobuf.Struct's values
// too), one at a time, and requires the hand decoder to decode it as
// protobuf does when it is listed above, and to decline it otherwise.
func TestEveryFieldIsDecodedOrDeclined(t *testing.T) {
	var seen []string
	eachField(func() *extprocv3.ProcessingRequest { return &extprocv3.ProcessingRequest{} }, func(p string, m *extprocv3.ProcessingRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		ok := sameAsProtobuf(t, p, b)
		listed := slices.Contains(decoded, canonical(p, alias)) || inStruct(p)
		seen = append(seen, canonical(p, alias))
		if ok != listed {
			t.Errorf("%s: decoded by hand %v, listed %v", p, ok, listed)
		}
	})
	requireFields(t, decoded, seen, "ProcessingRequest")
}

// requireFields fails t for each path listed that the walk did not see:
// a field the message type no longer has.
func requireFields(t *testing.T, listed, seen []string, what string) {
	t.Helper()
	for _, p := range listed {
		if !slices.Contains(seen, p) {
			t.Errorf("%s is listed but %s has no such field", p, what)
		}
	}
}

// inStruct says whether p is inside an attribute's struct, whose values
// (every kind, nested structs and lists) are all decoded.
func inStruct(p string) bool { return strings.HasPrefix(p, "attributes.") }

// message is the message type a field holds (a map's value), or nil.
func message(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		return fd.MapValue().Message()
	}
	return fd.Message()
}

// child returns fd's message in m, set (a map's under the key "k").
func child(m protoreflect.Message, fd protoreflect.FieldDescriptor) protoreflect.Message {
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		k := protoreflect.ValueOfString("k").MapKey()
		if !mp.Has(k) {
			mp.Set(k, mp.NewValue())
		}
		return mp.Get(k).Message()
	case fd.IsList():
		l := m.Mutable(fd).List()
		if l.Len() == 0 {
			l.Append(l.NewElement())
		}
		return l.Get(0).Message()
	default:
		return m.Mutable(fd).Message()
	}
}

// setLeaf sets fd in m to a value that is not the zero one.
func setLeaf(m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	if fd.Message() != nil {
		child(m, fd) // an empty message, present
		return
	}
	v := scalar(fd)
	if fd.IsList() {
		m.Mutable(fd).List().Append(v)
		return
	}
	m.Set(fd, v)
}

func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("v")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("v"))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	default:
		return protoreflect.ValueOfUint64(7)
	}
}

// TestDeclinesWhatProtobufMerges: a message field or oneof sent twice is
// merged by protobuf; the hand decoder leaves those to it.
func TestDeclinesWhatProtobufMerges(t *testing.T) {
	msgs := envoyMessages(t)
	headers, body := msgs["request_headers.txtpb"], msgs["request_body.txtpb"]
	for name, b := range map[string][]byte{
		"two header messages":               append(slices.Clip(headers), headers...),
		"headers, then a body":              append(slices.Clip(headers), body...),
		"a body twice":                      append(slices.Clip(body), body...),
		"not UTF-8":                         []byte("\x12\x08\x0a\x06\x0a\x04\x0a\x02\xff\xfe"),
		"a key not UTF-8, then one that is": []byte("\x12\x0a\x0a\x08\x0a\x06\x0a\x01\xff\x0a\x01a"),
		"cut short":                         headers[:len(headers)-3],
		"an attribute twice":                append(slices.Clip(msgs["response_body.txtpb"]), msgs["response_body.txtpb"]...),
	} {
		if sameAsProtobuf(t, name, b) {
			t.Errorf("%s: decoded by hand", name)
		}
	}
}

// TestStructValues: every kind of value an attribute may hold.
func TestStructValues(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{
		"null": nil, "n": 200.5, "s": "x", "yes": true, "no": false,
		"nested": map[string]any{"list": []any{1.0, "two", map[string]any{"k": []any{}}}},
		"empty":  map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &extprocv3.ProcessingRequest{
		Request:    &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{}},
		Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": s, "other": {}},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !sameAsProtobuf(t, "attributes", b) {
		t.Fatal("declined")
	}
}

// FuzzDecode: whatever the bytes, the hand decoder either declines them
// or decodes them as protobuf does.
func FuzzDecode(f *testing.F) {
	for _, b := range envoyMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsProtobuf(t, "fuzzed", b)
	})
}

// TestHeaderValuesDoNotShareRoom: an append to one header's value never
// writes over the next one's.
func TestHeaderValuesDoNotShareRoom(t *testing.T) {
	m := &extprocv3.ProcessingRequest{}
	if !Decode(envoyMessages(t)["request_headers.txtpb"], m) {
		t.Fatal("declined")
	}
	hs := m.GetRequestHeaders().GetHeaders().GetHeaders()
	_ = append(hs[0].RawValue, "xxxx"...)
	if got := string(hs[1].RawValue); got != "/alpha/v1/messages" {
		t.Fatalf("the second header's value is %q after an append to the first", got)
	}
}

func BenchmarkDecode(b *testing.B) {
	msgs := envoyMessages(b)
	for _, via := range []string{"hand", "protobuf"} {
		b.Run(via, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				for _, m := range msgs {
					r := &extprocv3.ProcessingRequest{}
					if via == "hand" {
						Decode(m, r)
					} else if err := proto.Unmarshal(m, r); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
