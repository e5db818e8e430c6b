//go:build tools

package deps

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/labstack/echo/v4"
	_ "github.com/redis/go-redis/v9"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	_ "go.opentelemetry.io/otel/metric"
	_ "go.opentelemetry.io/otel/sdk/metric"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.opentelemetry.io/otel/trace"
	_ "go.uber.org/goleak"
	_ "pgregory.net/rapid"
)
