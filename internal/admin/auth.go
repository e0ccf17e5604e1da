package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Environment variables that configure the admin token.
const (
	TokenEnv     = "GATEWAY_ADMIN_TOKEN"
	TokenFileEnv = "GATEWAY_ADMIN_TOKEN_FILE"
)

// Metadata keys of admin calls.
const (
	// ActorHeader names who acts, for the audit trail; "admin" when absent.
	ActorHeader = "x-admin-actor"
	authHeader  = "authorization"
)

// DefaultActor is the audit actor of calls that name none.
const DefaultActor = "admin"

// TokenFromEnv returns the admin token from GATEWAY_ADMIN_TOKEN, or from the
// file GATEWAY_ADMIN_TOKEN_FILE names (a mounted secret), with surrounding
// white space removed. It returns "" when neither is set, and an error when
// both are, since the two could disagree.
func TokenFromEnv(getenv func(string) string) (string, error) {
	token, file := getenv(TokenEnv), getenv(TokenFileEnv)
	switch {
	case token != "" && file != "":
		return "", fmt.Errorf("admin token: set %s or %s, not both", TokenEnv, TokenFileEnv)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("admin token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("admin token: %s names an empty file", TokenFileEnv)
		}
		return token, nil
	}
	return strings.TrimSpace(token), nil
}

// authenticator checks the bearer token of every call.
type authenticator struct {
	// want is the SHA-256 of the token: comparing fixed-size digests takes
	// the same time whatever the length or content of the presented token.
	want [32]byte
}

func newAuthenticator(token string) (*authenticator, error) {
	if token == "" {
		return nil, errors.New("admin: empty token")
	}
	return &authenticator{want: sha256.Sum256([]byte(token))}, nil
}

var errUnauthenticated = status.Error(codes.Unauthenticated, "admin token missing or wrong")

func (a *authenticator) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(authHeader)
	if len(vals) != 1 {
		return errUnauthenticated
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return errUnauthenticated
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], a.want[:]) != 1 {
		return errUnauthenticated
	}
	return nil
}

func (a *authenticator) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return next(srv, ss)
}

// actor returns the audit actor of the call: the x-admin-actor metadata,
// cleaned (CleanActor), or DefaultActor.
func actor(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(ActorHeader)
	if len(vals) == 0 {
		return DefaultActor
	}
	if a := CleanActor(vals[0]); a != "" {
		return a
	}
	return DefaultActor
}

// CleanActor is s as the audit trail keeps an actor: control characters
// dropped, spaces trimmed, cut to 64 bytes.
func CleanActor(s string) string {
	a := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	a = strings.TrimSpace(a)
	if len(a) > 64 {
		a = strings.ToValidUTF8(a[:64], "")
	}
	return a
}

// WithActor returns ctx naming actor as the caller, for in-process calls of
// the Service that have no gRPC metadata.
func WithActor(ctx context.Context, actor string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(ActorHeader, actor)
	return metadata.NewIncomingContext(ctx, md)
}
