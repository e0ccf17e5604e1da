package admin

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// NewServer returns a gRPC server with svc registered behind the admin
// token: a call without `authorization: Bearer TOKEN` fails with
// Unauthenticated. Each call is logged by method, actor and result code;
// requests and responses, which may carry secrets, never are.
func NewServer(svc *Service, token string, log *slog.Logger) (*grpc.Server, error) {
	auth, err := newAuthenticator(token)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	logCall := func(ctx context.Context, method string, start time.Time, err error) {
		log.Info("admin call", "method", method, "actor", actor(ctx),
			"code", status.Code(err).String(), "duration", time.Since(start).String())
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
				start := time.Now()
				resp, err := next(ctx, req)
				logCall(ctx, info.FullMethod, start, err)
				return resp, err
			},
			auth.unary,
		),
		grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
				start := time.Now()
				err := next(srv, ss)
				logCall(ss.Context(), info.FullMethod, start, err)
				return err
			},
			auth.stream,
		),
	)
	adminv1.RegisterAdminServer(s, svc)
	return s, nil
}
