package wire

import (
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Message is what the processor receives a stream's messages into (Recv):
// a ProcessingRequest and the storage the codec decodes its request
// headers, response headers and request body into, kept from one message
// and one stream to the next, so that a request's messages allocate little
// beyond their header names (one string per header map, which readers may
// keep). What a message decoded by hand holds is valid until the next
// message of the same kind is received into the same Message, or until it
// is released: its reader keeps strings or copies, never the headers
// themselves. A request has one message of each of these kinds (its body
// is buffered whole), so within a stream nothing is overwritten; the
// response's body chunks and trailers are allocated apart, as are messages
// protobuf decodes.
type Message struct {
	Request extprocv3.ProcessingRequest

	requestHeaders  extprocv3.ProcessingRequest_RequestHeaders
	responseHeaders extprocv3.ProcessingRequest_ResponseHeaders
	requestBody     extprocv3.ProcessingRequest_RequestBody
	reqHeaders      headerStore
	respHeaders     headerStore
	reqBody         bodyStore
}

// headerStore is one kind of message's headers, kept for reuse.
type headerStore struct {
	h       extprocv3.HttpHeaders
	m       corev3.HeaderMap
	headers []corev3.HeaderValue
	ptrs    []*corev3.HeaderValue
	raws    []byte
}

// bodyStore is the request's body, kept for reuse.
type bodyStore struct {
	b    extprocv3.HttpBody
	data []byte
}

// What a released Message keeps, at most: storage larger than this (a
// large upload, a request with hundreds of headers) goes with its request,
// so that the pool holds no more than this per stream it served at once
// (docs/security.md's Bounds, checked by docs/bounds_test.go).
const (
	KeptBodyBytes        = 64 << 10 // of the request's body
	KeptHeaderValueBytes = 16 << 10 // of a header map's values
	KeptHeaders          = 128      // headers of a header map
)

var messages = sync.Pool{New: func() any { return new(Message) }}

// NewMessage returns a Message for a stream, from those released.
func NewMessage() *Message { return messages.Get().(*Message) }

// Release gives m back once nothing reads what it holds: the stream has
// ended and its request has settled.
func (m *Message) Release() {
	m.Request.Reset()
	m.reqHeaders.release()
	m.respHeaders.release()
	if cap(m.reqBody.data) > KeptBodyBytes {
		m.reqBody.data = nil
	}
	m.reqBody.b.Reset()
	messages.Put(m)
}

func (s *headerStore) release() {
	s.h.Reset()
	s.m.Reset()
	if cap(s.headers) > KeptHeaders {
		s.headers, s.ptrs = nil, nil
	}
	clear(s.headers[:cap(s.headers)]) // the previous request's strings
	if cap(s.raws) > KeptHeaderValueBytes {
		s.raws = nil
	}
}

// ProtoReflect is m's request's: to protobuf, and so to grpc's own codec
// on a server without this package's, a Message is its request.
func (m *Message) ProtoReflect() protoreflect.Message { return m.Request.ProtoReflect() }

// Receiver is the side of a stream messages are received from.
type Receiver interface {
	RecvMsg(m any) error
}

// Recv receives the stream's next message into m and returns it; it is
// valid as Message says.
func (m *Message) Recv(r Receiver) (*extprocv3.ProcessingRequest, error) {
	m.Request.Reset()
	if err := r.RecvMsg(m); err != nil {
		return nil, err
	}
	return &m.Request, nil
}
