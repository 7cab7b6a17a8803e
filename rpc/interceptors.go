package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster/door"
)

// The unary chain is recovery -> metrics -> auth (with TLS) -> deadline ->
// logging -> handler. Recovery is outermost so a panic anywhere below it
// becomes Internal and the server keeps serving; metrics sits above the role
// and deadline checks so refused calls are counted too.

func recoveryHandler(log *slog.Logger) recovery.RecoveryHandlerFuncContext {
	return func(ctx context.Context, p any) error {
		// Called from the deferred recover, so the stack still shows the panic site.
		log.ErrorContext(ctx, "panic in gRPC handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error: the server recovered from a panic (logged on the node)")
	}
}

func recoveryUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoveryHandler(log)))
}

func recoveryStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(recoveryHandler(log)))
}

// deadlineExempt lists methods probes call without a deadline: grpc-health-probe,
// load balancers and grpcurl's reflection.
func deadlineExempt(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// deadlineUnary refuses calls without a deadline: a call that may wait for an
// ID window forever ties up the server and hides overload from the caller.
func deadlineUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); !ok && !deadlineExempt(info.FullMethod) {
			return nil, status.Errorf(codes.InvalidArgument,
				"%s called without a deadline: set one on every call (e.g. context.WithTimeout, grpcurl -max-time)", info.FullMethod)
		}
		return handler(ctx, req)
	}
}

// loggingUnary logs the start and finish of every call. Successful calls log
// at Debug: GetIDBatch runs thousands of times a second on a busy node.
func loggingUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	// Calls that fail are logged at most once a minute per caller and
	// (method, code), with a count of the rest: a client retrying a refused
	// call in a loop (30,000 a minute were seen) costs a line, not a disk.
	failed := door.NewRateLog(log, 0)
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		if slog.Level(lvl) < slog.LevelInfo {
			log.Log(ctx, slog.Level(lvl), msg, fields...)
			return
		}
		_, identity := callerOf(ctx)
		failed.Log(slog.Level(lvl), callKind(fields), identity, msg, fields...)
	})
	return logging.UnaryServerInterceptor(logger,
		logging.WithLogOnEvents(logging.StartCall, logging.FinishCall),
		logging.WithLevels(callLogLevel),
	)
}

func callLogLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK:
		return logging.LevelDebug
	case codes.InvalidArgument, codes.NotFound, codes.Canceled, codes.AlreadyExists,
		codes.Unauthenticated, codes.FailedPrecondition:
		return logging.LevelInfo
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return logging.LevelError
	default:
		return logging.LevelWarn
	}
}

// callKind names a logged call by its method and code, from
// go-grpc-middleware's fields.
func callKind(fields []any) string {
	var method, code string
	for i := 0; i+1 < len(fields); i += 2 {
		switch fields[i] {
		case "grpc.method":
			method = fmt.Sprint(fields[i+1])
		case "grpc.code":
			code = fmt.Sprint(fields[i+1])
		}
	}
	return method + " " + code
}
