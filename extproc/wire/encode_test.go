package wire

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// sameBytesAsProtobuf encodes m by hand and with protobuf, fails t if the
// two differ where Encode accepted it, and reports whether it did. The
// bytes must be protobuf's own, not merely decode alike: Envoy reads them.
func sameBytesAsProtobuf(t *testing.T, what string, m *extprocv3.ProcessingResponse) bool {
	t.Helper()
	want, werr := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	got, ok := Encode(nil, m)
	if ok && werr != nil {
		t.Fatalf("%s: encoded what protobuf refuses (%v)", what, werr)
	}
	if ok && !bytes.Equal(got, want) {
		back := &extprocv3.ProcessingResponse{}
		err := proto.Unmarshal(got, back)
		t.Fatalf("%s: encoded\n% x\n(decoding to %v, %v)\nprotobuf encodes\n% x\nfrom %v", what, got, prototext.Format(back), err, want, prototext.Format(m))
	}
	// The codec, declining or not, gives protobuf's bytes.
	c := NewCodec()
	bs, cerr := c.Marshal(m)
	if (cerr == nil) != (werr == nil) || (cerr == nil && !bytes.Equal(bs.Materialize(), want)) {
		t.Fatalf("%s: codec gave % x, %v; protobuf % x, %v", what, bs.Materialize(), cerr, want, werr)
	}
	bs.Free()
	if hand, _ := c.Encoded(); (hand == 1) != ok {
		t.Fatalf("%s: encoded by hand %v, counted %d", what, ok, hand)
	}
	return ok
}

// The encoder's fields: every field of ProcessingResponse and the messages
// under it is either encoded here or declined, and the test knows which.
// A field a later go-control-plane adds fails the test until it is listed
// here and written in encode.go, or declined there.
var encoded = []string{
	"request_headers", "response_headers", "request_body", "response_body", "request_trailers", "response_trailers",
	"request_headers.response",
	"request_headers.response.status", "request_headers.response.clear_route_cache",
	"request_headers.response.header_mutation",
	"request_headers.response.header_mutation.set_headers",
	"request_headers.response.header_mutation.set_headers.header",
	"request_headers.response.header_mutation.set_headers.header.key",
	"request_headers.response.header_mutation.set_headers.header.value",
	"request_headers.response.header_mutation.set_headers.header.raw_value",
	"request_headers.response.header_mutation.set_headers.append_action",
	"request_headers.response.header_mutation.set_headers.keep_empty_value",
	"request_headers.response.header_mutation.remove_headers",
	"request_headers.response.body_mutation",
	"request_headers.response.body_mutation.body", "request_headers.response.body_mutation.clear_body",
	"mode_override",
	"mode_override.request_header_mode", "mode_override.response_header_mode",
	"mode_override.request_body_mode", "mode_override.response_body_mode",
	"mode_override.request_trailer_mode", "mode_override.response_trailer_mode",
	"override_message_timeout", "override_message_timeout.seconds", "override_message_timeout.nanos",
}

// replyAlias: the paths whose messages the list names once.
var replyAlias = map[string]string{
	"response_headers.":                "request_headers.",
	"request_body.":                    "request_headers.",
	"response_body.":                   "request_headers.",
	"response_trailers.":               "request_trailers.",
	"request_trailers.header_mutation": "request_headers.response.header_mutation",
}

// TestEveryReplyFieldIsEncodedOrDeclined sets each field of
// ProcessingResponse, down through every message it holds, one at a time,
// and requires the hand encoder to write protobuf's bytes when it is listed
// above, and to decline it otherwise.
func TestEveryReplyFieldIsEncodedOrDeclined(t *testing.T) {
	var seen []string
	eachField(func() *extprocv3.ProcessingResponse { return &extprocv3.ProcessingResponse{} }, func(p string, m *extprocv3.ProcessingResponse) {
		ok := sameBytesAsProtobuf(t, p, m)
		listed := slices.Contains(encoded, canonical(p, replyAlias))
		seen = append(seen, canonical(p, replyAlias))
		if ok != listed {
			t.Errorf("%s: encoded by hand %v, listed %v", p, ok, listed)
		}
	})
	requireFields(t, encoded, seen, "ProcessingResponse")
}

// replies are the processor's kinds of reply, as it builds them
// (extproc/envoywire.go), with lengths on both sides of a one-byte length
// and of grpc's pooling threshold.
func replies() map[string]*extprocv3.ProcessingResponse {
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	}
	mode := &filterv3.ProcessingMode{RequestHeaderMode: filterv3.ProcessingMode_SEND, RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
		RequestTrailerMode: filterv3.ProcessingMode_SKIP, ResponseHeaderMode: filterv3.ProcessingMode_SKIP,
		ResponseBodyMode: filterv3.ProcessingMode_STREAMED, ResponseTrailerMode: filterv3.ProcessingMode_SKIP}
	common := func(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}}
	}
	out := map[string]*extprocv3.ProcessingResponse{
		"request headers": {
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders:    []*corev3.HeaderValueOption{set("x-gateway-upstream", "alpha"), set("x-gateway-request-id", "req_0123456789abcdef")},
					RemoveHeaders: []string{"authorization", "x-api-key"},
				},
			}}},
			ModeOverride: mode,
		},
		"request body": common(&extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{set("x-gateway-model", "claude-sonnet-4-5"), set("x-gateway-vendor-key", "alpha-1")},
		}}),
		"a reply's chunk":     {Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}},
		"a reply's end":       {Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}},
		"an empty body":       common(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{}}}),
		"a cleared body":      common(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}),
		"no clearing":         common(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{}}}),
		"a nil header":        common(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{nil}}}),
		"a value, kept empty": common(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k", Value: "v"}, KeepEmptyValue: true}}}}),
		"a negative status":   common(&extprocv3.CommonResponse{Status: -1}),
		"trailers":            {Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"x"}}}}},
		"a timeout":           {OverrideMessageTimeout: durationpb.New(90_500_000_000)},
		"a nil response":      {Response: &extprocv3.ProcessingResponse_ResponseBody{}},
		"nothing":             {},
	}
	for _, n := range []int{100, 127, 128, 200, 1 << 10, 1<<10 + 1, 16383, 16384, 70_000, 3 << 20} {
		body := bytes.Repeat([]byte("x"), n)
		out["a body of "+strconv.Itoa(n)] = common(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}})
		out["a header of "+strconv.Itoa(n)] = common(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-long", string(body))}}})
	}
	return out
}

// TestEncodesWhatTheProcessorSends: the processor's replies take the fast
// path, byte for byte protobuf's.
func TestEncodesWhatTheProcessorSends(t *testing.T) {
	for name, m := range replies() {
		if !sameBytesAsProtobuf(t, name, m) {
			t.Errorf("%s: declined", name)
		}
	}
}

// TestDeclinesWhatItDoesNotWrite: an immediate response, and a string
// protobuf refuses.
func TestDeclinesWhatItDoesNotWrite(t *testing.T) {
	bad := string([]byte{0xff, 0xfe})
	for name, m := range map[string]*extprocv3.ProcessingResponse{
		"an immediate response": {Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: []byte(`{}`), Details: "gateway_429"}}},
		"a key not UTF-8": {Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: bad}}}}}}}},
		"a removal not UTF-8": {Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"ok", bad}}}}}},
	} {
		if sameBytesAsProtobuf(t, name, m) {
			t.Errorf("%s: encoded by hand", name)
		}
	}
}

// FuzzEncode: whatever reply protobuf can decode from the bytes, the hand
// encoder either declines it or writes protobuf's bytes for it.
func FuzzEncode(f *testing.F) {
	for _, m := range replies() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) < 4<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &extprocv3.ProcessingResponse{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		// Fields unknown to this go-control-plane are kept by protobuf and
		// never sent by the processor: not the encoder's to write.
		if hasUnknown(m.ProtoReflect()) {
			return
		}
		sameBytesAsProtobuf(t, "fuzzed", m)
	})
}

// hasUnknown reports whether m or a message under it holds unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	found := len(m.GetUnknown()) > 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
					found = found || hasUnknown(e.Message())
					return !found
				})
			}
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknown(v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			found = found || hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

func BenchmarkEncode(b *testing.B) {
	rs := replies()
	msgs := []*extprocv3.ProcessingResponse{rs["request headers"], rs["request body"], rs["a reply's chunk"], rs["a reply's end"]}
	c := NewCodec()
	for _, via := range []string{"hand", "protobuf"} {
		b.Run(via, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				for _, m := range msgs {
					if via == "hand" {
						bs, _ := c.Marshal(m)
						bs.Free()
					} else {
						bs, err := c.proto.Marshal(m)
						if err != nil {
							b.Fatal(err)
						}
						bs.Free()
					}
				}
			}
		})
	}
}
