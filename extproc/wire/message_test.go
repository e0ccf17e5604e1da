package wire

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// codecReceiver hands Recv one serialised message through the codec, as
// grpc's RecvMsg does.
type codecReceiver struct {
	c Codec
	b []byte
}

func (r codecReceiver) RecvMsg(m any) error { return r.c.Unmarshal(split(r.b), m) }

func requestHeaders(kv ...string) *extprocv3.ProcessingRequest {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: m}}}
}

func requestBody(body []byte) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}
}

// One Message receives stream after stream: each message decodes as
// protobuf decodes it, whatever the one before it of the same kind held
// (more headers, fewer, longer values, a larger body, none), and what a
// reader kept of an earlier message as strings is unchanged.
func TestMessageReusedDecodesAsProtobuf(t *testing.T) {
	envoy := envoyMessages(t)
	big := bytes.Repeat([]byte("x"), 3000)
	seq := [][]byte{
		envoy["request_headers.txtpb"], envoy["request_body.txtpb"], envoy["response_body.txtpb"], envoy["response_end.txtpb"],
		marshal(t, requestHeaders(":path", "/beta/v1/chat/completions", "authorization", "Bearer "+strings.Repeat("k", 200), "a", "1", "b", "2", "c", "3")),
		marshal(t, requestBody(big)),
		marshal(t, requestHeaders(":path", "/v1")),
		marshal(t, requestBody(nil)),
		marshal(t, requestHeaders()),
		marshal(t, requestBody([]byte(`{"model":"m"}`))),
		envoy["request_headers.txtpb"], envoy["request_body.txtpb"],
	}
	codec := NewCodec()
	m := NewMessage()
	defer m.Release()
	type kept struct{ key, value string }
	var keep []kept
	var keptFrom []*extprocv3.ProcessingRequest
	for i, b := range seq {
		got, err := m.Recv(codecReceiver{codec, b})
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want := &extprocv3.ProcessingRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("message %d decoded into a reused Message:\n%v\nprotobuf decodes\n%v", i, prototext.Format(got), prototext.Format(want))
		}
		for _, h := range got.GetRequestHeaders().GetHeaders().GetHeaders() {
			keep = append(keep, kept{h.GetKey(), string(h.GetRawValue())})
			keptFrom = append(keptFrom, want)
		}
	}
	if by, byProtobuf := codec.Decoded(); by != uint64(len(seq)) || byProtobuf != 0 {
		t.Fatalf("decoded %d by hand and %d by protobuf, want all %d by hand", by, byProtobuf, len(seq))
	}
	// The strings kept are those of their own message.
	i := 0
	for _, k := range keep {
		found := false
		for _, h := range keptFrom[i].GetRequestHeaders().GetHeaders().GetHeaders() {
			if h.GetKey() == k.key && string(h.GetRawValue()) == k.value {
				found = true
			}
		}
		if !found {
			t.Fatalf("kept header %q=%q changed by a later message", k.key, k.value)
		}
		i++
	}
}

// A released Message keeps at most its bounds: a large upload's body or a
// request's many headers go with the request.
func TestReleasedMessageKeepsItsBound(t *testing.T) {
	codec := NewCodec()
	m := new(Message)
	kv := []string{":path", "/v1", "x-big", strings.Repeat("v", KeptHeaderValueBytes+1)}
	for i := range KeptHeaders {
		kv = append(kv, "h", string(rune('a'+i%26)))
	}
	for _, b := range [][]byte{marshal(t, requestHeaders(kv...)), marshal(t, requestBody(bytes.Repeat([]byte("x"), KeptBodyBytes+1)))} {
		if _, err := m.Recv(codecReceiver{codec, b}); err != nil {
			t.Fatal(err)
		}
	}
	if cap(m.reqHeaders.raws) <= KeptHeaderValueBytes || cap(m.reqHeaders.headers) <= KeptHeaders || cap(m.reqBody.data) <= KeptBodyBytes {
		t.Fatalf("the request did not fill the storage past its bounds: %d, %d, %d", cap(m.reqHeaders.raws), cap(m.reqHeaders.headers), cap(m.reqBody.data))
	}
	m.Release()
	if cap(m.reqHeaders.raws) > KeptHeaderValueBytes || cap(m.reqHeaders.headers) > KeptHeaders || cap(m.reqBody.data) > KeptBodyBytes {
		t.Fatalf("released with %d bytes of values, %d headers, %d bytes of body kept", cap(m.reqHeaders.raws), cap(m.reqHeaders.headers), cap(m.reqBody.data))
	}
	if m.Request.GetRequest() != nil || m.reqHeaders.m.GetHeaders() != nil {
		t.Fatal("released holding its request")
	}
}

// A Message is its request to protobuf: grpc's own codec, on a server
// without this package's, receives into it.
func TestMessageIsItsRequestToProtobuf(t *testing.T) {
	b := envoyMessages(t)["request_headers.txtpb"]
	m := new(Message)
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	want := &extprocv3.ProcessingRequest{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&m.Request, want) {
		t.Fatalf("protobuf decoded into a Message\n%v\nwant\n%v", prototext.Format(&m.Request), prototext.Format(want))
	}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
