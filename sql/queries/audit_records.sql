-- name: AuditRecordCreate :one
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES (@action, @data, @origin_ip, @resource_id, @resource_type, @user_id)
RETURNING *;

-- name: AuditRecordListByResource :many
SELECT * FROM audit_records
WHERE resource_type = @resource_type AND resource_id = @resource_id
ORDER BY id;
