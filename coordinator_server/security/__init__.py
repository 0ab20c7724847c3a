"""ACLs and SCRAM credentials as state of the log (Kafka's AclControlManager and
ScramControlManager, AclsImage and ScramImage, and the loader that keeps the images).

They live on one partition of the log, the security partition (0): its shard holds the
managers (`acl_control`, `scram_control`: CreateAcls, DeleteAcls, AlterUserScramCredentials
as writes, DescribeAcls and DescribeUserScramCredentials as reads of the committed state),
and every node keeps an image of what is committed there (`image`), read from the log by a
task of its own (`image_loader`), which the authorizer and the SASL mechanisms consult.
The managers and the image are pure; the loader is the one module here that waits on the
log.
"""
