// Package wire is the gRPC codec of the sidecar's ext_proc stream.
//
// Decoding Envoy's messages is the largest part of what the processor does
// per request that a processor doing nothing does too: protobuf's
// reflection-driven decoder allocates each header's key and value, each
// struct of the message and its oneof wrappers on its own, about 90
// allocations for a metered request's four messages. This codec decodes
// the messages Envoy sends, ProcessingRequest, by hand into the same
// generated types, with one allocation per header map for its keys and one
// for its values; received into a Message, the request's headers and body
// and the response's headers go into storage the Message keeps for the
// next stream, and only the keys are allocated.
//
// The hand decoder reads only the fields it knows and declines the rest: a
// message with any other field (one a later Envoy adds, metadata it was
// configured to send), a field repeated that protobuf would merge, a string
// that is not UTF-8, or anything malformed is decoded by protobuf instead.
// So every message decodes as proto.Unmarshal decodes it; the tests hold
// the two to that, field by field and on fuzzed bytes.
//
// The replies, ProcessingResponse, are encoded by hand the same way
// (Encode): what the processor sends to a request's messages is written
// byte for byte as proto.Marshal writes it, without its size pass and
// reflection; an immediate response, and any field Encode does not write,
// go to protobuf.
package wire

import (
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is grpc's proto codec with ProcessingRequest decoded and
// ProcessingResponse encoded by hand; every other message (health checks,
// the access log service) goes to grpc's own. It carries grpc's name,
// "proto": Envoy sends application/grpc.
type Codec struct {
	proto encoding.CodecV2
	// byHand and byProtobuf count the ProcessingRequests each decoded: a
	// message protobuf decodes is one holding something the hand decoder
	// does not read (an Envoy configured to send more, or a newer one).
	byHand, byProtobuf *atomic.Uint64
	// encodedByHand and encodedByProtobuf count the ProcessingResponses
	// each encoded: protobuf encodes an immediate response, and what
	// Encode does not write.
	encodedByHand, encodedByProtobuf *atomic.Uint64
}

// NewCodec returns the codec, for grpc.ForceServerCodecV2.
func NewCodec() Codec {
	return Codec{
		proto:  encoding.GetCodecV2(grpcproto.Name),
		byHand: new(atomic.Uint64), byProtobuf: new(atomic.Uint64),
		encodedByHand: new(atomic.Uint64), encodedByProtobuf: new(atomic.Uint64),
	}
}

// Decoded returns how many of Envoy's messages the codec decoded by hand
// and how many it left to protobuf.
func (c Codec) Decoded() (byHand, byProtobuf uint64) {
	return c.byHand.Load(), c.byProtobuf.Load()
}

// Encoded returns how many of the processor's replies the codec encoded by
// hand and how many it left to protobuf.
func (c Codec) Encoded() (byHand, byProtobuf uint64) {
	return c.encodedByHand.Load(), c.encodedByProtobuf.Load()
}

// Name is the content subtype the codec serves.
func (Codec) Name() string { return grpcproto.Name }

// Marshal encodes v: a reply to Envoy by hand where Encode can, anything
// else (and what Encode declines) with grpc's codec. go-control-plane's
// generated marshaller would need a build tag (vtprotobuf) every build of
// the gateway would have to carry.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*extprocv3.ProcessingResponse); ok {
		if b, ok := encodeReply(m); ok {
			c.encodedByHand.Add(1)
			return b, nil
		}
		c.encodedByProtobuf.Add(1)
	}
	return c.proto.Marshal(v)
}

// Unmarshal decodes data into v; a ProcessingRequest by hand where Decode
// can, else by protobuf. A Message's request is decoded into the
// Message's storage.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	var m *extprocv3.ProcessingRequest
	var into *Message
	switch t := v.(type) {
	case *Message:
		m, into = &t.Request, t
	case *extprocv3.ProcessingRequest:
		m = t
	default:
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if decode(b, m, into) {
		c.byHand.Add(1)
		return nil
	}
	c.byProtobuf.Add(1)
	return proto.Unmarshal(b, m) // which resets what Decode filled first
}
