package kafka

// Grant is one Kafka ACL a service needs, in Strimzi's KafkaUser terms:
// a resource (Type topic or group; Pattern literal or prefix) and the
// operations allowed on it. Access lists are kept here, next to the topic
// names they follow from, so that the KafkaUsers of deploy/k8s are checked
// against them and the services' tests run on a broker granting only them.
type Grant struct {
	Type       string // "topic" or "group"
	Name       string
	Pattern    string   // "literal" or "prefix"
	Operations []string // "Read", "Write", "Describe"
}

// ChangePrefix is the name prefix every change topic of t shares:
// <prefix>.public. (cdc publishes tables of the public schema only).
func (t Topics) ChangePrefix() string { return ChangeTopic(t.Prefix, "public", "") }

// CDCAccess is what cdc needs: to write the change topics and the
// heartbeat topic. Describe is for the metadata the producer asks for;
// nothing is read, created or altered (the topics are declared by the
// deployment), and idempotent producing needs no cluster grant since
// Kafka 3.0 (Write on a topic suffices).
func CDCAccess(t Topics) []Grant {
	return []Grant{
		{Type: "topic", Name: t.ChangePrefix(), Pattern: "prefix", Operations: []string{"Write", "Describe"}},
		{Type: "topic", Name: t.Heartbeat, Pattern: "literal", Operations: []string{"Write", "Describe"}},
	}
}

// AuditAccess is what the audit-consumer needs: to read the change topics
// as a member of group, and to write the notifications.
func AuditAccess(t Topics, group string) []Grant {
	return []Grant{
		{Type: "topic", Name: t.ChangePrefix(), Pattern: "prefix", Operations: []string{"Read", "Describe"}},
		{Type: "group", Name: group, Pattern: "literal", Operations: []string{"Read"}},
		{Type: "topic", Name: t.Notifications, Pattern: "literal", Operations: []string{"Write", "Describe"}},
	}
}

// AuditGroup is the audit-consumer's default consumer group.
const AuditGroup = "paysched-audit"

// WebhookAccess is what the webhook-dispatcher needs: to read the
// notifications as a member of group (its default is webhook.Group), and
// to write to them the endpoint_disabled events it announces. It reads no
// change topic.
func WebhookAccess(t Topics, group string) []Grant {
	return []Grant{
		{Type: "topic", Name: t.Notifications, Pattern: "literal", Operations: []string{"Read", "Write", "Describe"}},
		{Type: "group", Name: group, Pattern: "literal", Operations: []string{"Read"}},
	}
}
