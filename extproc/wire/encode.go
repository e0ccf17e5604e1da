package wire

import (
	"sync"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Encode appends m, serialised as proto.Marshal serialises it, to b and
// reports whether it could. It encodes the replies the processor sends to
// a request's messages: a headers, body or trailers response, with a
// header mutation, a body (or its clearing), a route cache clearing, a
// processing mode and a message timeout. It declines anything else (an
// immediate response, dynamic metadata, a streamed body, trailers, the
// drain and window fields, a header's deprecated append) and a string that is not UTF-8 (proto.Marshal refuses
// those), leaving b's appended part undefined: those go to protobuf.
//
// Fields are written in proto.Marshal's order (by number, a oneof's member
// after the other fields), and a scalar at its zero value is left out
// unless it is a oneof's member.
func Encode(b []byte, m *extprocv3.ProcessingResponse) ([]byte, bool) {
	if m.DynamicMetadata != nil || len(m.TypedDynamicMetadata) > 0 || m.ServerWindowUpdate != nil ||
		m.RequestDrainRequests || m.RequestDrainResponses || m.ProtoReflect().Has(requestDrain) {
		return b, false
	}
	// protobuf writes a oneof's member after the other fields.
	if m.ModeOverride != nil {
		b = processingMode(b, 9, m.ModeOverride)
	}
	if d := m.OverrideMessageTimeout; d != nil {
		var at int
		b, at = begin(b, 10)
		b = varintField(b, 1, uint64(d.Seconds))
		b = varintField(b, 2, uint64(d.Nanos))
		b = end(b, at)
	}
	ok := true
	switch r := m.Response.(type) {
	case nil:
	case *extprocv3.ProcessingResponse_RequestHeaders:
		b, ok = holding(b, 1, r.RequestHeaders.GetResponse())
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		b, ok = holding(b, 2, r.ResponseHeaders.GetResponse())
	case *extprocv3.ProcessingResponse_RequestBody:
		b, ok = holding(b, 3, r.RequestBody.GetResponse())
	case *extprocv3.ProcessingResponse_ResponseBody:
		b, ok = holding(b, 4, r.ResponseBody.GetResponse())
	case *extprocv3.ProcessingResponse_RequestTrailers:
		b, ok = trailersResponse(b, 5, r.RequestTrailers)
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		b, ok = trailersResponse(b, 6, r.ResponseTrailers)
	default:
		return b, false
	}
	return b, ok
}

// The deprecated fields, which the processor never sets, are declined; they
// are named by their descriptors, not by their deprecated Go fields.
var (
	requestDrain = (&extprocv3.ProcessingResponse{}).ProtoReflect().Descriptor().Fields().ByName("request_drain")
	headerAppend = (&corev3.HeaderValueOption{}).ProtoReflect().Descriptor().Fields().ByName("append")
)

// begin starts a message field: its tag and a one-byte length, which end
// fills in (and widens when the message is 128 bytes or more). It returns
// where the message starts.
func begin(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return append(b, 0), len(b) + 1
}

// end writes the length of the message that starts at at.
func end(b []byte, at int) []byte {
	n := len(b) - at
	if n < 0x80 {
		b[at-1] = byte(n)
		return b
	}
	// A longer length: move the message up to make room for it.
	extra := protowire.SizeVarint(uint64(n)) - 1
	for range extra {
		b = append(b, 0)
	}
	copy(b[at+extra:], b[at:at+n])
	protowire.AppendVarint(b[:at-1], uint64(n))
	return b
}

// holding writes a headers or a body response: a message holding only
// its common response, c (nil: none).
func holding(b []byte, num protowire.Number, c *extprocv3.CommonResponse) ([]byte, bool) {
	b, at := begin(b, num)
	ok := true
	if c != nil {
		b, ok = commonResponse(b, 1, c)
	}
	return end(b, at), ok
}

func trailersResponse(b []byte, num protowire.Number, r *extprocv3.TrailersResponse) ([]byte, bool) {
	b, at := begin(b, num)
	ok := true
	if r.HeaderMutation != nil {
		b, ok = headerMutation(b, 1, r.HeaderMutation)
	}
	return end(b, at), ok
}

func commonResponse(b []byte, num protowire.Number, r *extprocv3.CommonResponse) ([]byte, bool) {
	if r.Trailers != nil {
		return b, false
	}
	b, at := begin(b, num)
	b = varintField(b, 1, uint64(r.Status))
	if r.HeaderMutation != nil {
		var ok bool
		if b, ok = headerMutation(b, 2, r.HeaderMutation); !ok {
			return b, false
		}
	}
	if r.BodyMutation != nil {
		var in int
		b, in = begin(b, 3)
		switch m := r.BodyMutation.Mutation.(type) {
		case nil:
		case *extprocv3.BodyMutation_Body:
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendBytes(b, m.Body)
		case *extprocv3.BodyMutation_ClearBody:
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, protowire.EncodeBool(m.ClearBody))
		default:
			return b, false
		}
		b = end(b, in)
	}
	if r.ClearRouteCache {
		b = varintField(b, 5, 1)
	}
	return end(b, at), true
}

func headerMutation(b []byte, num protowire.Number, h *extprocv3.HeaderMutation) ([]byte, bool) {
	b, at := begin(b, num)
	for _, o := range h.SetHeaders {
		var ok bool
		if b, ok = headerValueOption(b, 1, o); !ok {
			return b, false
		}
	}
	for _, k := range h.RemoveHeaders {
		if !utf8.ValidString(k) {
			return b, false
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, k)
	}
	return end(b, at), true
}

func headerValueOption(b []byte, num protowire.Number, o *corev3.HeaderValueOption) ([]byte, bool) {
	b, at := begin(b, num)
	if o == nil {
		// protobuf writes a nil element of a repeated message as an
		// empty message.
		return end(b, at), true
	}
	if o.ProtoReflect().Has(headerAppend) {
		return b, false
	}
	var in int // where a message inside starts
	if h := o.Header; h != nil {
		if !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return b, false
		}
		b, in = begin(b, 1)
		b = stringField(b, 1, h.Key)
		b = stringField(b, 2, h.Value)
		if len(h.RawValue) > 0 {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendBytes(b, h.RawValue)
		}
		b = end(b, in)
	}
	b = varintField(b, 3, uint64(o.AppendAction))
	if o.KeepEmptyValue {
		b = varintField(b, 4, 1)
	}
	return end(b, at), true
}

func processingMode(b []byte, num protowire.Number, p *filterv3.ProcessingMode) []byte {
	b, at := begin(b, num)
	b = varintField(b, 1, uint64(p.RequestHeaderMode))
	b = varintField(b, 2, uint64(p.ResponseHeaderMode))
	b = varintField(b, 3, uint64(p.RequestBodyMode))
	b = varintField(b, 4, uint64(p.ResponseBodyMode))
	b = varintField(b, 5, uint64(p.RequestTrailerMode))
	b = varintField(b, 6, uint64(p.ResponseTrailerMode))
	return end(b, at)
}

// varintField writes a varint field (an enum, a bool, an integer) unless
// it is zero. An enum's negative value is written as protobuf writes it,
// sign-extended to ten bytes: uint64 of the int32.
func varintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func stringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// scratch is where a reply is encoded before it is copied out at its size.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// encodeReply returns m serialised as grpc's codec would hand it over: a
// small reply in a slice of its own size, a larger one (a body) in a
// buffer from grpc's pool, which the transport returns once written. False
// when Encode declines m.
func encodeReply(m *extprocv3.ProcessingResponse) (mem.BufferSlice, bool) {
	p := scratch.Get().(*[]byte)
	defer func() {
		if cap(*p) <= 64<<10 {
			*p = (*p)[:0]
			scratch.Put(p)
		}
	}()
	b, ok := Encode((*p)[:0], m)
	*p = b
	if !ok {
		return nil, false
	}
	if mem.IsBelowBufferPoolingThreshold(len(b)) {
		return mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}, true
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(len(b))
	copy(*buf, b)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, true
}
