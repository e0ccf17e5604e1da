package wire

import (
	"math"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// Decode fills m, which must be empty, from b, a serialised
// ProcessingRequest, as proto.Unmarshal would, and reports whether it
// could. It declines, leaving m partly filled, a message holding anything
// but the fields below, once each: the oneof's headers, bodies and
// trailers (the deprecated header attributes aside), an empty
// metadata_context (what Envoy sends when no metadata is forwarded),
// attributes, observability_mode and protocol_config.
func Decode(b []byte, m *extprocv3.ProcessingRequest) bool {
	return decode(b, m, nil)
}

// decode is Decode into into's storage, or into storage of its own if
// into is nil.
func decode(b []byte, m *extprocv3.ProcessingRequest, into *Message) bool {
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok {
			return false
		}
		b = rest
		if typ == protowire.VarintType {
			if num != 10 {
				return false
			}
			m.ObservabilityMode = v.varint != 0
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		switch num {
		case 2, 3, 4, 5, 6, 7:
			if m.Request != nil {
				return false // protobuf merges or replaces; leave it to protobuf
			}
			if !request(num, v.bytes, m, into) {
				return false
			}
		case 8:
			if len(v.bytes) != 0 || m.MetadataContext != nil {
				return false
			}
			m.MetadataContext = &corev3.Metadata{}
		case 9:
			key, s, ok := structEntry(v.bytes, 0)
			if !ok {
				return false
			}
			if m.Attributes == nil {
				m.Attributes = make(map[string]*structpb.Struct, 1)
			}
			if _, dup := m.Attributes[key]; dup {
				return false
			}
			m.Attributes[key] = s
		case 11:
			if m.ProtocolConfig != nil {
				return false
			}
			pc, ok := protocolConfig(v.bytes)
			if !ok {
				return false
			}
			m.ProtocolConfig = pc
		default:
			return false
		}
	}
	return true
}

// value is a field's payload: a varint's or a fixed64's number, or a
// length-delimited field's bytes.
type value struct {
	varint uint64
	bytes  []byte
}

// field reads one field off b: its number, wire type and payload, and what
// follows it. Groups and fixed32 are not in these messages and are
// declined.
func field(b []byte) (protowire.Number, protowire.Type, value, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, value{}, nil, false
	}
	b = b[n:]
	var v value
	switch typ {
	case protowire.VarintType:
		v.varint, n = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		v.varint, n = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		v.bytes, n = protowire.ConsumeBytes(b)
	default:
		return 0, 0, value{}, nil, false
	}
	if n < 0 {
		return 0, 0, value{}, nil, false
	}
	return num, typ, v, b[n:], true
}

// request decodes the oneof's member num, into into's storage where it
// keeps one. What it sets when it declines is reset by protobuf's
// decoding.
func request(num protowire.Number, b []byte, m *extprocv3.ProcessingRequest, into *Message) bool {
	switch num {
	case 2:
		if into == nil {
			h, ok := httpHeaders(b, nil)
			m.Request = &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}
			return ok
		}
		h, ok := httpHeaders(b, &into.reqHeaders)
		into.requestHeaders.RequestHeaders = h
		m.Request = &into.requestHeaders
		return ok
	case 3:
		if into == nil {
			h, ok := httpHeaders(b, nil)
			m.Request = &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}
			return ok
		}
		h, ok := httpHeaders(b, &into.respHeaders)
		into.responseHeaders.ResponseHeaders = h
		m.Request = &into.responseHeaders
		return ok
	case 4:
		if into == nil {
			body, ok := httpBody(b, nil)
			m.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: body}
			return ok
		}
		body, ok := httpBody(b, &into.reqBody)
		into.requestBody.RequestBody = body
		m.Request = &into.requestBody
		return ok
	case 5:
		body, ok := httpBody(b, nil)
		m.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: body}
		return ok
	case 6:
		t, ok := httpTrailers(b)
		m.Request = &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: t}
		return ok
	case 7:
		t, ok := httpTrailers(b)
		m.Request = &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: t}
		return ok
	}
	return false
}

func httpTrailers(b []byte) (*extprocv3.HttpTrailers, bool) {
	t := &extprocv3.HttpTrailers{}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok || num != 1 || typ != protowire.BytesType || t.Trailers != nil {
			return nil, false
		}
		b = rest
		if t.Trailers, ok = headerMap(v.bytes, nil); !ok {
			return nil, false
		}
	}
	return t, true
}

func httpHeaders(b []byte, into *headerStore) (*extprocv3.HttpHeaders, bool) {
	h := &extprocv3.HttpHeaders{}
	if into != nil {
		h = &into.h
		h.Reset()
	}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType && h.Headers == nil:
			if h.Headers, ok = headerMap(v.bytes, into); !ok {
				return nil, false
			}
		case num == 3 && typ == protowire.VarintType:
			h.EndOfStream = v.varint != 0
		default:
			return nil, false
		}
	}
	return h, true
}

func httpBody(b []byte, into *bodyStore) (*extprocv3.HttpBody, bool) {
	body := &extprocv3.HttpBody{}
	if into != nil {
		body = &into.b
		body.Reset()
	}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.BytesType:
			// The last occurrence wins, as protobuf's; the message's
			// buffer goes back to grpc's pool, so the body is copied.
			switch {
			case into == nil || len(v.bytes) == 0:
				body.Body = append([]byte(nil), v.bytes...)
			default:
				into.data = append(into.data[:0], v.bytes...)
				body.Body = into.data
			}
		case typ != protowire.VarintType:
			return nil, false
		case num == 2:
			body.EndOfStream = v.varint != 0
		case num == 3:
			body.EndOfStreamWithoutMessage = v.varint != 0
		case num == 4:
			body.GrpcMessageCompressed = v.varint != 0
		case num == 5:
			body.DrainComplete = v.varint != 0
		default:
			return nil, false
		}
	}
	return body, true
}

// headerMap decodes a header map in two passes: the first checks every
// header and measures them, the second fills one array of headers, one
// string holding every key and one byte slice holding every value, which
// the headers share (each value capped at its own length, so that an
// append to one copies it rather than overwrite its neighbour). The array
// and the values are into's, when it is not nil; the keys' string is the
// map's own, since readers keep header names.
func headerMap(b []byte, into *headerStore) (*corev3.HeaderMap, bool) {
	n, keyLen, rawLen := 0, 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, v, next, ok := field(rest)
		if !ok || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		rest = next
		k, _, raw, ok := header(v.bytes, true)
		if !ok {
			return nil, false
		}
		n++
		keyLen += len(k)
		rawLen += len(raw)
	}
	m, headers, ptrs, raws := into.take(n, rawLen)
	if n == 0 {
		return m, true
	}
	m.Headers = ptrs
	var keys strings.Builder
	keys.Grow(keyLen)
	// Each key's end in the builder's string, known only once it is whole.
	var endsBuf [32]int
	ends := endsBuf[:0]
	for i, rest := 0, b; len(rest) > 0; i++ {
		_, _, v, next, _ := field(rest)
		rest = next
		k, val, raw := headerFields(v.bytes) // checked in the first pass
		h := &headers[i]
		keys.Write(k)
		ends = append(ends, keys.Len())
		if len(val) > 0 {
			h.Value = string(val)
		}
		if len(raw) > 0 {
			at := len(raws)
			raws = append(raws, raw...) // never grown: the values' slices stay in it
			h.RawValue = raws[at:len(raws):len(raws)]
		}
		m.Headers[i] = h
	}
	all, at := keys.String(), 0
	for i, end := range ends {
		headers[i].Key = all[at:end]
		at = end
	}
	return m, true
}

// take returns an empty header map, n empty headers and pointers for
// them, and an empty slice with room for rawLen bytes of values: s's, or
// new ones if s is nil.
func (s *headerStore) take(n, rawLen int) (*corev3.HeaderMap, []corev3.HeaderValue, []*corev3.HeaderValue, []byte) {
	if s == nil {
		if n == 0 {
			return &corev3.HeaderMap{}, nil, nil, nil
		}
		return &corev3.HeaderMap{}, make([]corev3.HeaderValue, n), make([]*corev3.HeaderValue, n), make([]byte, 0, rawLen)
	}
	s.m.Reset()
	if cap(s.headers) < n {
		s.headers, s.ptrs = make([]corev3.HeaderValue, n), make([]*corev3.HeaderValue, n)
	}
	headers := s.headers[:n]
	clear(headers)
	if cap(s.raws) < rawLen {
		s.raws = make([]byte, 0, rawLen)
	}
	return &s.m, headers, s.ptrs[:n], s.raws[:0]
}

// headerFields reads a HeaderValue header has checked already.
func headerFields(b []byte) (key, val, raw []byte) {
	key, val, raw, _ = header(b, false)
	return key, val, raw
}

// header reads one HeaderValue: its key, value and raw value, the last
// occurrence of each as protobuf keeps; check also checks every
// occurrence of the strings for UTF-8.
func header(b []byte, check bool) (key, val, raw []byte, ok bool) {
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok || typ != protowire.BytesType {
			return nil, nil, nil, false
		}
		b = rest
		switch num {
		case 1:
			key = v.bytes
		case 2:
			val = v.bytes
		case 3:
			raw = v.bytes
			continue
		default:
			return nil, nil, nil, false
		}
		// Every occurrence of a string is checked, as protobuf checks it;
		// the last is kept.
		if check && !utf8.Valid(v.bytes) {
			return nil, nil, nil, false
		}
	}
	return key, val, raw, true
}

func protocolConfig(b []byte) (*extprocv3.ProtocolConfiguration, bool) {
	pc := &extprocv3.ProtocolConfiguration{}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok || typ != protowire.VarintType {
			return nil, false
		}
		b = rest
		switch num {
		case 1:
			pc.RequestBodyMode = filterv3.ProcessingMode_BodySendMode(int32(v.varint))
		case 2:
			pc.ResponseBodyMode = filterv3.ProcessingMode_BodySendMode(int32(v.varint))
		case 3:
			pc.SendBodyWithoutWaitingForHeaderResponse = v.varint != 0
		default:
			return nil, false
		}
	}
	return pc, true
}

// maxDepth bounds the nesting of structs and lists decoded here; deeper
// ones go to protobuf, which has its own limit.
const maxDepth = 32

// entry reads a map entry whose key is a string and whose value a message
// decoded by value: its key and its value, an empty one when absent, as
// protobuf makes it.
func entry[T any](b []byte, depth int, value func([]byte, int) (*T, bool)) (string, *T, bool) {
	var key []byte
	var v *T
	for len(b) > 0 {
		num, typ, f, rest, ok := field(b)
		if !ok || typ != protowire.BytesType {
			return "", nil, false
		}
		b = rest
		switch {
		case num == 1:
			// Every occurrence is checked, as protobuf checks it; the last
			// is kept.
			if key = f.bytes; !utf8.Valid(key) {
				return "", nil, false
			}
		case num == 2 && v == nil:
			if v, ok = value(f.bytes, depth+1); !ok {
				return "", nil, false
			}
		default:
			return "", nil, false
		}
	}
	if v == nil {
		v = new(T)
	}
	return string(key), v, true
}

// structEntry reads a map<string, Struct> entry.
func structEntry(b []byte, depth int) (string, *structpb.Struct, bool) {
	return entry(b, depth, decodeStruct)
}

func decodeStruct(b []byte, depth int) (*structpb.Struct, bool) {
	if depth > maxDepth {
		return nil, false
	}
	s := &structpb.Struct{}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		b = rest
		key, val, ok := entry(v.bytes, depth, decodeValue)
		if !ok {
			return nil, false
		}
		if s.Fields == nil {
			s.Fields = make(map[string]*structpb.Value, 4)
		}
		if _, dup := s.Fields[key]; dup {
			return nil, false
		}
		s.Fields[key] = val
	}
	return s, true
}

func decodeValue(b []byte, depth int) (*structpb.Value, bool) {
	if depth > maxDepth {
		return nil, false
	}
	val := &structpb.Value{}
	for len(b) > 0 {
		num, typ, v, rest, ok := field(b)
		if !ok || val.Kind != nil {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && typ == protowire.VarintType:
			val.Kind = &structpb.Value_NullValue{NullValue: structpb.NullValue(int32(v.varint))}
		case num == 2 && typ == protowire.Fixed64Type:
			val.Kind = &structpb.Value_NumberValue{NumberValue: math.Float64frombits(v.varint)}
		case num == 3 && typ == protowire.BytesType:
			if !utf8.Valid(v.bytes) {
				return nil, false
			}
			val.Kind = &structpb.Value_StringValue{StringValue: string(v.bytes)}
		case num == 4 && typ == protowire.VarintType:
			val.Kind = &structpb.Value_BoolValue{BoolValue: v.varint != 0}
		case num == 5 && typ == protowire.BytesType:
			s, ok := decodeStruct(v.bytes, depth+1)
			if !ok {
				return nil, false
			}
			val.Kind = &structpb.Value_StructValue{StructValue: s}
		case num == 6 && typ == protowire.BytesType:
			l := &structpb.ListValue{}
			for lb := v.bytes; len(lb) > 0; {
				num, typ, lv, next, ok := field(lb)
				if !ok || num != 1 || typ != protowire.BytesType {
					return nil, false
				}
				lb = next
				e, ok := decodeValue(lv.bytes, depth+1)
				if !ok {
					return nil, false
				}
				l.Values = append(l.Values, e)
			}
			val.Kind = &structpb.Value_ListValue{ListValue: l}
		default:
			return nil, false
		}
	}
	return val, true
}
