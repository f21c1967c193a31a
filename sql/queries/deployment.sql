-- name: DeploymentNamespace :one
SELECT namespace FROM deployment;

-- name: ClockNow :one
-- The database's clock: the one clock that leases, idle times and ages are
-- judged by.
SELECT now()::timestamptz;
