"""The ACP client: process launch, transport filter, our Client handlers."""
