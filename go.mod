module github.com/agentscm/agentscm

go 1.26
