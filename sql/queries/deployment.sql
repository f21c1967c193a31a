-- name: DeploymentNamespace :one
SELECT namespace FROM deployment;

-- name: ClockNow :one
-- The database's clock: the one clock that leases, idle times and ages are
-- judged by.
SELECT now()::timestamptz;

-- name: DeploymentCreatedAt :one
-- When the database was created: the events pass lists no event older.
SELECT created_at FROM deployment;
